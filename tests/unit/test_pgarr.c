/* pgarr (common/pg/pgarr.h): the binary array parameters are what
 * PostgreSQL's own array_send writes, byte for byte, so the server's
 * array_recv takes them. The expected bytes below are a PostgreSQL 15
 * server's answers to SELECT encode(array_send(...), 'hex') for the same
 * arrays. */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

#include "pgarr.h"

/* The hex text's bytes into out; how many. */
static size_t unhex(const char *hex, unsigned char *out, size_t max)
{
    size_t n = strlen(hex) / 2;
    assert_true(n <= max);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
        out[i] = (unsigned char)v;
    }
    return n;
}

/* a holds exactly the bytes of hex. */
static void assert_bytes(const struct pgarr *a, const char *hex)
{
    unsigned char want[512];
    size_t n = unhex(hex, want, sizeof(want));
    assert_false(a->failed);
    assert_int_equal(a->len, n);
    assert_memory_equal(a->data, want, n);
}

/* ARRAY[1,-1,0,9223372036854775807,-9223372036854775808,4294967296]::bigint[]:
 * one dimension, no NULLs, int8 (oid 20), 6 elements from 1, each 8
 * big-endian bytes after its length. */
static const char *const I64_SIX = "00000001"
                                   "00000000"
                                   "00000014"
                                   "00000006"
                                   "00000001"
                                   "00000008"
                                   "0000000000000001"
                                   "00000008"
                                   "ffffffffffffffff"
                                   "00000008"
                                   "0000000000000000"
                                   "00000008"
                                   "7fffffffffffffff"
                                   "00000008"
                                   "8000000000000000"
                                   "00000008"
                                   "0000000100000000";

static void test_i64_known(void **state)
{
    (void)state;
    const int64_t v[] = { 1, -1, 0, INT64_MAX, INT64_MIN, INT64_C(4294967296) };
    struct pgarr a = { 0 };
    assert_int_equal(pgarr_i64(&a, v, 6), 0);
    assert_bytes(&a, I64_SIX);
    /* the same, an element at a time */
    pgarr_begin(&a, PGARR_INT8);
    for (int i = 0; i < 6; i++)
        pgarr_add_i64(&a, v[i]);
    assert_int_equal(pgarr_end(&a), 0);
    assert_bytes(&a, I64_SIX);
    /* ARRAY[42]::bigint[] */
    const int64_t one = 42;
    assert_int_equal(pgarr_i64(&a, &one, 1), 0);
    assert_bytes(&a, "000000010000000000000014000000010000000100000008000000000000002a");
    pgarr_free(&a);
}

/* '{}'::bigint[] and '{}'::text[]: no dimension at all, the header alone,
 * also after a longer array in the same buffer. */
static void test_empty(void **state)
{
    (void)state;
    const int64_t v[] = { 7, 8, 9 };
    struct pgarr a = { 0 };
    assert_int_equal(pgarr_i64(&a, NULL, 0), 0);
    assert_bytes(&a, "000000000000000000000014");
    assert_int_equal(pgarr_i64(&a, v, 3), 0);
    assert_int_equal(a.n, 3);
    assert_int_equal(pgarr_i64(&a, v, 0), 0);
    assert_bytes(&a, "000000000000000000000014");
    pgarr_begin(&a, PGARR_TEXT);
    assert_int_equal(pgarr_end(&a), 0);
    assert_bytes(&a, "000000000000000000000019");
    pgarr_free(&a);
    assert_null(a.data);
    assert_int_equal(a.len, 0);
}

/* ARRAY['paid', '', 'NULL', 'a"b,c']::text[]: text (oid 25), each element
 * its length and its bytes; no quoting, an empty word and a word spelled
 * NULL stay words. */
static void test_text_known(void **state)
{
    (void)state;
    const char *w[] = { "paid", "", "NULL", "a\"b,c" };
    struct pgarr a = { 0 };
    pgarr_begin(&a, PGARR_TEXT);
    for (int i = 0; i < 4; i++)
        pgarr_add_text(&a, w[i], strlen(w[i]));
    assert_int_equal(pgarr_end(&a), 0);
    assert_bytes(&a, "00000001"
                     "00000000"
                     "00000019"
                     "00000004"
                     "00000001"
                     "00000004"
                     "70616964"
                     "00000000"
                     "00000004"
                     "4e554c4c"
                     "00000005"
                     "6122622c63");
    pgarr_free(&a);
}

/* A batch's worth and more (the payments send 1,024 of each): the buffer
 * grows, every element in its place, the count in the header. */
static void test_large(void **state)
{
    (void)state;
    enum { N = 100000 };
    int64_t *v = malloc(N * sizeof(*v));
    assert_non_null(v);
    for (int i = 0; i < N; i++)
        v[i] = (i % 2 ? -1 : 1) * ((int64_t)i << 40) + i;
    struct pgarr a = { 0 };
    assert_int_equal(pgarr_i64(&a, v, N), 0);
    assert_int_equal(a.len, 20 + (size_t)N * 12);
    assert_memory_equal(a.data + 12, "\x00\x01\x86\xa0\x00\x00\x00\x01", 8); /* 100000 elements from 1 */
    for (int i = 0; i < N; i += 9973) {
        const unsigned char *e = a.data + 20 + (size_t)i * 12;
        uint64_t x = 0;
        assert_memory_equal(e, "\x00\x00\x00\x08", 4);
        for (int b = 0; b < 8; b++)
            x = x << 8 | e[4 + b];
        assert_true((int64_t)x == v[i]);
    }
    /* a text element of 100 kB */
    char *big = malloc(100000);
    assert_non_null(big);
    memset(big, 'x', 100000);
    pgarr_begin(&a, PGARR_TEXT);
    pgarr_add_text(&a, big, 100000);
    assert_int_equal(pgarr_end(&a), 0);
    assert_int_equal(a.len, 20 + 4 + 100000);
    assert_memory_equal(a.data + 20, "\x00\x01\x86\xa0", 4);
    pgarr_free(&a);
    free(big);
    free(v);
}

/* A text over the server's 1 GiB limit fails the array (never sent), until
 * the next pgarr_begin. */
static void test_too_long(void **state)
{
    (void)state;
    struct pgarr a = { 0 };
    pgarr_begin(&a, PGARR_TEXT);
    pgarr_add_text(&a, "x", (size_t)1 << 30);
    assert_true(a.failed);
    assert_int_equal(pgarr_end(&a), -1);
    pgarr_begin(&a, PGARR_TEXT);
    pgarr_add_text(&a, "ok", 2);
    assert_int_equal(pgarr_end(&a), 0);
    pgarr_free(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_i64_known), cmocka_unit_test(test_empty),    cmocka_unit_test(test_text_known),
        cmocka_unit_test(test_large),     cmocka_unit_test(test_too_long),
    };
    return cmocka_run_group_tests_name("pgarr", tests, NULL, NULL);
}
