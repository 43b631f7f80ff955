/* jsonint (common/base/jsonint.h): an integer member, its type and its range. */
#include "harness.h"

#include <jansson.h>

#include "jsonint.h"

static void test_get(void **state)
{
    (void)state;
    json_error_t e;
    json_t *o = json_loads("{\"a\":5,\"big\":9223372036854775807,\"neg\":-3,\"r\":1.0,\"s\":\"5\","
                           "\"t\":true,\"n\":null,\"z\":0}",
                           0, &e);
    int64_t v = 77;
    assert_non_null(o);
    assert_int_equal(jsonint_get(o, "a", 1, 10, &v), JSONINT_OK);
    assert_int_equal(v, 5);
    assert_int_equal(jsonint_get(o, "big", 1, INT64_MAX, &v), JSONINT_OK);
    assert_true(v == INT64_MAX);
    assert_int_equal(jsonint_get(o, "neg", INT64_MIN, 0, &v), JSONINT_OK);
    assert_int_equal(v, -3);
    v = 77;
    /* the bounds are inclusive, and *out is left alone on a failure */
    assert_int_equal(jsonint_get(o, "a", 5, 5, &v), JSONINT_OK);
    assert_int_equal(jsonint_get(o, "a", 6, 10, &v), JSONINT_OUT_OF_RANGE);
    assert_int_equal(jsonint_get(o, "a", 1, 4, &v), JSONINT_OUT_OF_RANGE);
    assert_int_equal(jsonint_get(o, "z", 1, INT64_MAX, &v), JSONINT_OUT_OF_RANGE);
    assert_int_equal(jsonint_get(o, "neg", 0, INT64_MAX, &v), JSONINT_OUT_OF_RANGE);
    assert_int_equal(v, 5);
    const char *not_int[] = { "r", "s", "t", "n" };
    for (size_t i = 0; i < ARRAY_SIZE(not_int); i++)
        assert_int_equal(jsonint_get(o, not_int[i], INT64_MIN, INT64_MAX, &v), JSONINT_NOT_INTEGER);
    assert_int_equal(jsonint_get(o, "missing", INT64_MIN, INT64_MAX, &v), JSONINT_MISSING);
    assert_int_equal(v, 5);
    json_decref(o);
    /* not an object: nothing is a member of it */
    o = json_loads("[1]", 0, &e);
    assert_int_equal(jsonint_get(o, "a", INT64_MIN, INT64_MAX, &v), JSONINT_MISSING);
    json_decref(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get),
    };
    return cmocka_run_group_tests_name("jsonint", tests, NULL, NULL);
}
