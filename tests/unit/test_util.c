#include "harness.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"
#include "log.h"
#include "util.h"

static void test_parse_i64(void **state)
{
    (void)state;
    int64_t v = 0;
    assert_int_equal(util_parse_i64("42", 1, 100, &v), 0);
    assert_int_equal(v, 42);
    assert_int_equal(util_parse_i64("9223372036854775807", 1, INT64_MAX, &v), 0);
    assert_true(v == INT64_MAX);
    assert_int_equal(util_parse_i64("-7", -10, 10, &v), 0);
    assert_int_equal(v, -7);
    const char *bad[] = { "", " 1", "1 ", "+1", "1x", "x1", "0x10", "9223372036854775808", "1.5", "-", NULL };
    for (int i = 0; bad[i]; i++)
        assert_int_equal(util_parse_i64(bad[i], INT64_MIN, INT64_MAX, &v), -1);
    assert_int_equal(util_parse_i64("0", 1, 10, &v), -1);   /* below min */
    assert_int_equal(util_parse_i64("11", 1, 10, &v), -1);  /* above max */
    assert_int_equal(util_parse_i64("-1", 0, 10, &v), -1);
    assert_int_equal(util_parse_i64(NULL, 0, 10, &v), -1);
}

/* util_i64_text writes what snprintf("%" PRId64) writes, the ends of the
 * range and every power of ten's neighbours included. */
static void test_i64_text(void **state)
{
    (void)state;
    int64_t vals[64];
    size_t n = 0;
    vals[n++] = 0;
    vals[n++] = INT64_MAX;
    vals[n++] = INT64_MIN;
    for (int64_t p = 1; p <= INT64_MAX / 10; p *= 10) {
        vals[n++] = p - 1;
        vals[n++] = -p;
        vals[n++] = p + 1;
    }
    for (size_t i = 0; i < n; i++) {
        char want[32], got[UTIL_I64_CHARS];
        int wn = snprintf(want, sizeof(want), "%" PRId64, vals[i]);
        size_t gn = util_i64_text(got, vals[i]);
        assert_string_equal(got, want);
        assert_int_equal(gn, (size_t)wn);
    }
}

static void test_random_hex(void **state)
{
    (void)state;
    char a[33], b[33];
    assert_int_equal(util_random_hex(a, 16), 0);
    assert_int_equal(util_random_hex(b, 16), 0);
    assert_int_equal(strlen(a), 32);
    assert_int_equal(strspn(a, "0123456789abcdef"), 32);
    assert_string_not_equal(a, b);
}

static void test_backoff_bounds(void **state)
{
    (void)state;
    int64_t max_seen = 0;
    for (int attempt = 0; attempt < 20; attempt++) {
        for (int i = 0; i < 200; i++) {
            int64_t d = util_backoff_ms(attempt, 5, 200);
            int64_t ceiling = attempt >= 6 ? 200 : 5LL << attempt;
            if (ceiling > 200)
                ceiling = 200;
            assert_true(d >= 0 && d <= ceiling);
            if (d > max_seen)
                max_seen = d;
        }
    }
    /* jitter really spreads: the cap is approached */
    assert_true(max_seen > 150);
}

static void test_keys_hash_tags(void **state)
{
    (void)state;
    char k[KEYS_MAX];
    assert_int_equal(keys_item(k, sizeof(k), "seckill", 42, KEYS_ITEM_STOCK), (int)strlen("seckill:{item:42}:stock"));
    assert_string_equal(k, "seckill:{item:42}:stock");
    keys_item(k, sizeof(k), "p", 7, KEYS_ITEM_PENDING);
    assert_string_equal(k, "p:{item:7}:pending");
    /* The group is FNV-1a 32 of the name mod 16, worked out by hand (a
     * different number here means every lock moved: see keys.h). */
    assert_int_equal(keys_lock_group("user:9"), 3);
    keys_lock(k, sizeof(k), "seckill", "user:9");
    assert_string_equal(k, "seckill:lock:{lk:3}"); /* the group's hash: the lock is its field "user:9" */
    /* Users spread over every group, so a batch is cut into several calls. */
    int seen[KEYS_LOCK_GROUPS] = { 0 };
    for (int u = 0; u < 1600; u++) {
        char name[32];
        snprintf(name, sizeof(name), "user:%d", u);
        unsigned g = keys_lock_group(name);
        assert_true(g < KEYS_LOCK_GROUPS);
        seen[g]++;
    }
    for (int g = 0; g < KEYS_LOCK_GROUPS; g++)
        assert_true(seen[g] > 50);
    char small[8];
    assert_int_equal(keys_lock(small, sizeof(small), "seckill", "x"), -1);
}

/* 2026-11-21T10:00:00Z */
#define T0 INT64_C(1795255200000)

static void time_ok(const char *s, int64_t want)
{
    int64_t got = -1;
    if (util_parse_time_ms(s, &got) != 0)
        fail_msg("'%s' refused", s);
    if (got != want)
        fail_msg("'%s' -> %lld, want %lld", s, (long long)got, (long long)want);
}

static void time_bad(const char *s)
{
    int64_t got = 42;
    if (util_parse_time_ms(s, &got) == 0)
        fail_msg("'%s' accepted as %lld", s, (long long)got);
    assert_int_equal(got, 42); /* left alone */
}

static void test_parse_time_valid(void **state)
{
    (void)state;
    /* epoch milliseconds, as they are */
    time_ok("1795255200000", T0);
    time_ok("0", 0);
    time_ok("253402300799999", INT64_C(253402300799999));
    /* ISO 8601: Z, either case, T or a space */
    time_ok("2026-11-21T10:00:00Z", T0);
    time_ok("2026-11-21t10:00:00z", T0);
    time_ok("2026-11-21 10:00:00Z", T0);
    /* no zone: UTC */
    time_ok("2026-11-21T10:00:00", T0);
    /* offsets, with and without the colon, both signs */
    time_ok("2026-11-21T11:00:00+01:00", T0);
    time_ok("2026-11-21T11:00:00+0100", T0);
    time_ok("2026-11-21T05:30:00-04:30", T0);
    time_ok("2026-11-21T05:30:00-0430", T0);
    time_ok("2026-11-22T09:59:00+23:59", T0);
    /* fractions: milliseconds, padded, finer digits dropped */
    time_ok("2026-11-21T10:00:00.123Z", T0 + 123);
    time_ok("2026-11-21T10:00:00.5Z", T0 + 500);
    time_ok("2026-11-21T10:00:00.05+00:00", T0 + 50);
    time_ok("2026-11-21T10:00:00.123999Z", T0 + 123);
    /* edges: the epoch, a leap day, the last representable millisecond */
    time_ok("1970-01-01T00:00:00Z", 0);
    time_ok("2024-02-29T23:59:59Z", INT64_C(1709251199000));
    time_ok("9999-12-31T23:59:59.999Z", INT64_C(253402300799999));
}

static void test_parse_time_invalid(void **state)
{
    (void)state;
    int64_t got = 42;
    assert_int_equal(util_parse_time_ms(NULL, &got), -1);
    time_bad("");
    time_bad("junk");
    time_bad("-5");
    time_bad("12ab");
    /* dates that do not exist (timegm would move them) */
    time_bad("2026-02-30T00:00:00Z");
    time_bad("2025-02-29T00:00:00Z");
    time_bad("2026-04-31T00:00:00Z");
    time_bad("2026-13-01T00:00:00Z");
    time_bad("2026-00-10T00:00:00Z");
    time_bad("2026-11-00T00:00:00Z");
    /* times that do not exist */
    time_bad("2026-11-21T24:00:01Z");
    time_bad("2026-11-21T24:00:00Z");
    time_bad("2026-11-21T23:60:00Z");
    time_bad("2026-11-21T23:59:60Z");
    /* incomplete or trailing */
    time_bad("2026-11-21");
    time_bad("2026-11-21T10:00");
    time_bad("2026-11-21X10:00:00Z");
    time_bad("2026-11-21T10:00:00.Z");
    time_bad("2026-11-21T10:00:00Zjunk");
    time_bad("2026-11-21T10:00:00 ");
    time_bad("26-11-21T10:00:00Z");
    /* zones out of range or malformed */
    time_bad("2026-11-21T10:00:00+24:00");
    time_bad("2026-11-21T10:00:00+01:60");
    time_bad("2026-11-21T10:00:00+1");
    time_bad("2026-11-21T10:00:00+01:0");
    /* out of range: before the epoch, past year 9999 */
    time_bad("1969-12-31T23:59:59Z");
    time_bad("1970-01-01T00:00:00+00:01");
    time_bad("253402300800000");
    time_bad("99999999999999999999");
}

static void test_format_time_round_trip(void **state)
{
    (void)state;
    const int64_t v[] = { 0, 1, 999, T0, T0 + 123, INT64_C(1709251199000), INT64_C(253402300799999) };
    char buf[64];
    util_format_time_ms(T0 + 7, buf, sizeof(buf));
    assert_string_equal(buf, "2026-11-21T10:00:00.007Z");
    util_format_time_ms(0, buf, sizeof(buf));
    assert_string_equal(buf, "1970-01-01T00:00:00.000Z");
    for (size_t i = 0; i < ARRAY_SIZE(v); i++) {
        int64_t back = -1;
        util_format_time_ms(v[i], buf, sizeof(buf));
        assert_int_equal(util_parse_time_ms(buf, &back), 0);
        assert_int_equal(back, v[i]);
    }
}

static void test_sort_unique(void **state)
{
    (void)state;
    int64_t v[] = { 5, -2, 5, INT64_MAX, 0, -2, INT64_MIN, 5, 3 };
    const int64_t want[] = { INT64_MIN, -2, 0, 3, 5, INT64_MAX };
    size_t n = util_sort_unique_i64(v, ARRAY_SIZE(v));
    assert_int_equal(n, ARRAY_SIZE(want));
    for (size_t i = 0; i < n; i++)
        assert_true(v[i] == want[i]);
    assert_int_equal(util_sort_unique_i64(NULL, 0), 0);
    int64_t one = 9;
    assert_int_equal(util_sort_unique_i64(&one, 1), 1);
    /* the comparison bsearch finds them with; no overflow at the extremes */
    int64_t key = 3, lo = INT64_MIN, hi = INT64_MAX;
    assert_ptr_equal(bsearch(&key, v, n, sizeof(*v), util_cmp_i64), &v[3]);
    key = 4;
    assert_null(bsearch(&key, v, n, sizeof(*v), util_cmp_i64));
    assert_true(util_cmp_i64(&lo, &hi) < 0);
    assert_true(util_cmp_i64(&hi, &lo) > 0);
    assert_int_equal(util_cmp_i64(&hi, &hi), 0);
}

/* util_memdup copies what it is given, and gives a block of its own for
 * nothing at all (a message with an empty payload is still a message). */
static void test_memdup(void **state)
{
    (void)state;
    char *d = util_memdup("abc", 3);
    assert_non_null(d);
    assert_memory_equal(d, "abc", 3);
    free(d);
    d = util_memdup(NULL, 0);
    assert_non_null(d);
    free(d);
}

/* A summary line goes out at the first flush, then not before its period
 * (the events count meanwhile), then at once when forced; never without
 * events. */
static void test_log_summary(void **state)
{
    (void)state;
    struct log_summary s = { 0 };
    log_summary_flush(&s, LOG_LVL_DEBUG, "test: ", "events", 60000, true);
    assert_int_equal(s.last_ms, 0); /* nothing to say */
    log_summary_add(&s, "event %d", 1);
    log_summary_add(&s, "event %d", 2);
    assert_int_equal(s.n, 2);
    assert_string_equal(s.last, "event 2");
    log_summary_flush(&s, LOG_LVL_DEBUG, "test: ", "events", 60000, false);
    assert_int_equal(s.n, 0);
    assert_true(s.last_ms > 0);
    log_summary_add(&s, "event %d", 3);
    log_summary_flush(&s, LOG_LVL_DEBUG, "test: ", "events", 60000, false);
    assert_int_equal(s.n, 1); /* within the period: kept for the next line */
    log_summary_flush(&s, LOG_LVL_DEBUG, "test: ", "events", 60000, true);
    assert_int_equal(s.n, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_i64),
        cmocka_unit_test(test_i64_text),
        cmocka_unit_test(test_random_hex),
        cmocka_unit_test(test_backoff_bounds),
        cmocka_unit_test(test_keys_hash_tags),
        cmocka_unit_test(test_parse_time_valid),
        cmocka_unit_test(test_parse_time_invalid),
        cmocka_unit_test(test_format_time_round_trip),
        cmocka_unit_test(test_sort_unique),
        cmocka_unit_test(test_memdup),
        cmocka_unit_test(test_log_summary),
    };
    return cmocka_run_group_tests_name("util", tests, NULL, NULL);
}
