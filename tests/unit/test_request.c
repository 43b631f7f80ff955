/* The producer's request parsing: every bad input the API promises to refuse. */
#include "harness.h"

#include <string.h>

#include "request.h"

static int parse(const char *body, struct req_body *rb, char *err, size_t errlen)
{
    return req_parse(body, strlen(body), rb, err, errlen);
}

static void test_valid(void **state)
{
    (void)state;
    struct req_body rb;
    char err[128];
    assert_int_equal(parse("{\"user_id\": 42, \"item_id\": 1001}", &rb, err, sizeof(err)), 0);
    assert_true(rb.user_id == 42 && rb.item_id == 1001);
    /* Order does not matter, extra members are ignored, whitespace is JSON's. */
    assert_int_equal(parse(" {\"item_id\":7,\"note\":\"x\",\"user_id\":9223372036854775807}\n", &rb,
                           err, sizeof(err)), 0);
    assert_true(rb.user_id == INT64_MAX && rb.item_id == 7);
    /* user_id is optional (the token names the buyer); absent reads 0. */
    rb.user_id = 5;
    assert_int_equal(parse("{\"item_id\":3}", &rb, err, sizeof(err)), 0);
    assert_true(rb.user_id == 0 && rb.item_id == 3);
}

static void test_path_id(void **state)
{
    (void)state;
    int64_t id = 0;
    static const char *const bad[] = { "", "0", "007", "-1", "+1", "1x", "1/", "1 ", " 1", "1?x=1",
                                       "9223372036854775808", "99999999999999999999", "/1" };
    assert_int_equal(req_path_id("/api/v1/orders/123", "/api/v1/orders/", &id), 1);
    assert_true(id == 123);
    assert_int_equal(req_path_id("/api/v1/orders/9223372036854775807", "/api/v1/orders/", &id), 1);
    assert_true(id == INT64_MAX);
    assert_int_equal(req_path_id("/api/v1/seckill", "/api/v1/seckill/", &id), 0);
    assert_int_equal(req_path_id("/healthz", "/api/v1/orders/", &id), 0);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char url[64];
        snprintf(url, sizeof(url), "/api/v1/orders/%s", bad[i]);
        id = 77;
        assert_int_equal(req_path_id(url, "/api/v1/orders/", &id), -1);
    }
}

static void test_invalid(void **state)
{
    (void)state;
    static const struct {
        const char *body, *why;
    } bad[] = {
        { "", "empty body" },
        { "{", "malformed JSON" },
        { "[1,2]", "must be a JSON object" },
        { "42", "malformed JSON" }, /* jansson wants an object or array on top */
        { "{\"user_id\":1}", "missing item_id" },
        { "{\"user_id\":\"1\",\"item_id\":1}", "user_id must be an integer" },
        { "{\"user_id\":1.0,\"item_id\":1}", "user_id must be an integer" },
        { "{\"user_id\":1,\"item_id\":true}", "item_id must be an integer" },
        { "{\"user_id\":null,\"item_id\":1}", "user_id must be an integer" },
        { "{\"user_id\":0,\"item_id\":1}", "user_id must be positive" },
        { "{\"user_id\":1,\"item_id\":-5}", "item_id must be positive" },
        { "{\"user_id\":9223372036854775808,\"item_id\":1}", "malformed JSON" },
        { "{\"user_id\":1,\"item_id\":1e3}", "item_id must be an integer" },
        { "{\"user_id\":1,\"user_id\":2,\"item_id\":1}", "malformed JSON" },
        { "{\"user_id\":1,\"item_id\":1} trailing", "malformed JSON" },
        { "{\"user_id\":1,\"item_id\":1}{}", "malformed JSON" },
    };
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        struct req_body rb;
        char err[128] = "";
        if (parse(bad[i].body, &rb, err, sizeof(err)) != -1)
            fail_msg("accepted: %s", bad[i].body);
        if (strstr(err, bad[i].why) == NULL)
            fail_msg("%s: error '%s' does not say '%s'", bad[i].body, err, bad[i].why);
    }
}

static void test_embedded_nul(void **state)
{
    (void)state;
    struct req_body rb;
    char err[128];
    static const char body[] = "{\"user_id\":1,\"item_id\":1}\0junk";
    /* The length is the body's, not strlen's: the NUL and junk are refused. */
    assert_int_equal(req_parse(body, sizeof(body) - 1, &rb, err, sizeof(err)), -1);
}

static void test_content_type(void **state)
{
    (void)state;
    assert_true(req_content_type_ok("application/json"));
    assert_true(req_content_type_ok("Application/JSON; charset=utf-8"));
    assert_true(req_content_type_ok("application/json ;charset=utf-8"));
    assert_false(req_content_type_ok(NULL));
    assert_false(req_content_type_ok(""));
    assert_false(req_content_type_ok("text/plain"));
    assert_false(req_content_type_ok("application/jsonp"));
    assert_false(req_content_type_ok("application/x-www-form-urlencoded"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_path_id),
        cmocka_unit_test(test_embedded_nul),
        cmocka_unit_test(test_content_type),
    };
    return cmocka_run_group_tests_name("request", tests, NULL, NULL);
}
