#include "harness.h"

#include <string.h>

#include "keys.h"

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
    keys_lock(k, sizeof(k), "seckill", "user:9");
    assert_string_equal(k, "seckill:lock:{user:9}");
    keys_fence(k, sizeof(k), "seckill", "user:9");
    assert_string_equal(k, "seckill:fence:{user:9}");
    char small[8];
    assert_int_equal(keys_lock(small, sizeof(small), "seckill", "x"), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_i64),
        cmocka_unit_test(test_random_hex),
        cmocka_unit_test(test_backoff_bounds),
        cmocka_unit_test(test_keys_hash_tags),
    };
    return cmocka_run_group_tests_name("util", tests, NULL, NULL);
}
