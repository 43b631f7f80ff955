/* i64map (common/base/i64map.h): one-word and two-word keys, values and
 * sets, growth, reset and walk; and the mixer's spread. */
#include "harness.h"

#include <stdlib.h>

#include "i64map.h"

struct rec {
    int64_t a, b;
};

static void test_map(void **state)
{
    (void)state;
    struct i64map m;
    i64map_init(&m, 1, sizeof(struct rec));
    int64_t k = 7;
    assert_null(i64map_get(&m, &k));      /* no memory yet */
    for (int64_t i = 1; i <= 5000; i++) { /* grows from nothing */
        struct rec *r = i64map_put(&m, &i);
        assert_non_null(r);
        assert_int_equal(r->a, 0); /* new: zeroed */
        assert_int_equal(r->b, 0);
        *r = (struct rec){ i * 10, -i };
    }
    assert_int_equal(m.n, 5000);
    assert_true(m.cap >= 2 * m.n); /* at most half full */
    for (int64_t i = 1; i <= 5000; i++) {
        const struct rec *r = i64map_get(&m, &i);
        assert_non_null(r);
        assert_int_equal(r->a, i * 10);
        assert_int_equal(r->b, -i);
    }
    k = 5001;
    assert_null(i64map_get(&m, &k));
    k = -3; /* any id but 0 */
    assert_false(i64map_has(&m, &k));
    /* put on a key there: the same entry, not a new one */
    k = 42;
    assert_int_equal(((struct rec *)i64map_put(&m, &k))->a, 420);
    assert_int_equal(m.n, 5000);
    /* the walk sees every entry once */
    size_t pos = 0, seen = 0;
    int64_t sum = 0;
    const int64_t *key;
    struct rec *r;
    while ((r = i64map_next(&m, &pos, &key))) {
        assert_int_equal(r->a, *key * 10);
        sum += *key;
        seen++;
    }
    assert_int_equal(seen, 5000);
    assert_int_equal(sum, 5000 * 5001 / 2);
    i64map_clear(&m);
    assert_int_equal(m.n, 0);
    assert_false(i64map_has(&m, &k));
    pos = 0;
    assert_null(i64map_next(&m, &pos, &key));
    i64map_free(&m);
    assert_null(i64map_get(&m, &k));
}

/* Two-word keys: (a, b) and (b, a), (a, 0) and (a, -1) are different keys. */
static void test_pairs_set(void **state)
{
    (void)state;
    struct i64map m;
    i64map_init(&m, 2, 0);
    assert_int_equal(i64map_reset(&m, 100), 0);
    size_t cap = m.cap;
    const int64_t ab[2] = { 3, 4 }, ba[2] = { 4, 3 }, a0[2] = { 3, 0 }, am[2] = { 3, -1 };
    assert_non_null(i64map_put(&m, ab));
    assert_true(i64map_has(&m, ab));
    assert_false(i64map_has(&m, ba));
    assert_false(i64map_has(&m, a0));
    assert_non_null(i64map_put(&m, a0));
    assert_non_null(i64map_put(&m, am));
    assert_int_equal(m.n, 3);
    /* a set's "value" is its stored key */
    const int64_t *stored = i64map_get(&m, am);
    assert_int_equal(stored[0], 3);
    assert_int_equal(stored[1], -1);
    /* within the room reset made, no growth */
    for (int64_t i = 1; i <= 97; i++)
        assert_non_null(i64map_put(&m, (const int64_t[]){ 100 + i, i }));
    assert_int_equal(m.n, 100);
    assert_int_equal(m.cap, cap);
    /* a reset for fewer keeps the memory and empties it */
    assert_int_equal(i64map_reset(&m, 10), 0);
    assert_int_equal(m.cap, cap);
    assert_int_equal(m.n, 0);
    assert_false(i64map_has(&m, ab));
    /* a reset for more grows it */
    assert_int_equal(i64map_reset(&m, 1000), 0);
    assert_true(m.cap >= 2000);
    i64map_free(&m);
}

/* The mixer: fixed values (ratelimit's tables rely on murmur3's finalizer,
 * folded from the last word), and sequential ids spread over the low bits. */
static void test_hash(void **state)
{
    (void)state;
    const int64_t one = 1, zero = 0, pair[2] = { 1, 2 }, two = 2;
    assert_true(i64map_hash(&zero, 1) == 0);
    assert_true(i64map_hash(&one, 1) == 0xb456bcfc34c2cb2cull);
    /* (a, b) hashes as mix(a ^ mix(b)) */
    int64_t inner = (int64_t)i64map_hash(&two, 1), folded = 1 ^ inner;
    assert_true(i64map_hash(pair, 2) == i64map_hash(&folded, 1));
    int buckets[64] = { 0 };
    for (int64_t i = 1; i <= 64000; i++)
        buckets[i64map_hash(&i, 1) & 63]++;
    for (int i = 0; i < 64; i++)
        assert_true(buckets[i] > 800 && buckets[i] < 1200);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_map),
        cmocka_unit_test(test_pairs_set),
        cmocka_unit_test(test_hash),
    };
    return cmocka_run_group_tests_name("i64map", tests, NULL, NULL);
}
