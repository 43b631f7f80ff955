/* The order message codec and order ids. */
#include "harness.h"

#include <string.h>

#include "order.h"
#include "orderid.h"

static void test_roundtrip(void **state)
{
    (void)state;
    struct order in = { INT64_MAX, 9007199254740993LL, 1001, 1, 1795254835830LL }, out;
    char buf[ORDER_MSG_MAX], err[128];
    int n = order_encode(&in, buf, sizeof(buf));
    assert_true(n > 0);
    /* The id travels as a string: above 2^53 a JSON number would round. */
    assert_non_null(strstr(buf, "\"order_id\":\"9223372036854775807\""));
    assert_non_null(strstr(buf, "\"v\":1"));
    assert_int_equal(order_decode(buf, (size_t)n, &out, err, sizeof(err)), 0);
    assert_memory_equal(&in, &out, sizeof(in));
    /* The longest message fits the advertised buffer. */
    struct order max = { INT64_MAX, INT64_MAX, INT64_MAX, 1, INT64_MAX };
    assert_true(order_encode(&max, buf, sizeof(buf)) > 0);
    assert_int_equal(order_encode(&max, buf, 32), -1);
}

/* A buyer's cancel (issue #44): the same message with "type":"cancel"; an
 * order has no "type"; any other type is refused, not taken for an order. */
static void test_cancel_kind(void **state)
{
    (void)state;
    struct order in = { 77, 5, 1001, 1, 1795254835830LL, ORDER_CANCEL }, out;
    char buf[ORDER_MSG_MAX], err[128];
    int n = order_encode(&in, buf, sizeof(buf));
    assert_true(n > 0);
    assert_non_null(strstr(buf, "\"type\":\"cancel\""));
    assert_int_equal(order_decode(buf, (size_t)n, &out, err, sizeof(err)), 0);
    assert_int_equal(out.kind, ORDER_CANCEL);
    assert_memory_equal(&in, &out, sizeof(in));
    in.kind = ORDER_BUY;
    n = order_encode(&in, buf, sizeof(buf));
    assert_null(strstr(buf, "type"));
    assert_int_equal(order_decode(buf, (size_t)n, &out, err, sizeof(err)), 0);
    assert_int_equal(out.kind, ORDER_BUY);
    static const char *const bad[] = {
        "{\"v\":1,\"type\":\"buy\",\"order_id\":\"1\",\"user_id\":1,\"item_id\":1,\"qty\":1,\"reserved_at_ms\":1}",
        "{\"v\":1,\"type\":1,\"order_id\":\"1\",\"user_id\":1,\"item_id\":1,\"qty\":1,\"reserved_at_ms\":1}",
        "{\"v\":1,\"type\":\"cancel\\u0000x\",\"order_id\":\"1\",\"user_id\":1,\"item_id\":1,\"qty\":1,"
        "\"reserved_at_ms\":1}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(order_decode(bad[i], strlen(bad[i]), &out, err, sizeof(err)), -1);
        /* jansson itself refuses a NUL inside a string */
        assert_non_null(strstr(err, i < 2 ? "\"type\" is not \"cancel\"" : "bad JSON"));
    }
}

static void test_decode_rejects(void **state)
{
    (void)state;
    static const struct {
        const char *msg, *why;
    } bad[] = {
        { "not json", "bad JSON" },
        { "[]", "not a JSON object" },
        { "{\"order_id\":\"1\",\"user_id\":1,\"item_id\":1,\"qty\":1,\"reserved_at_ms\":1}", "missing \"v\"" },
        { "{\"v\":2,\"order_id\":\"1\",\"user_id\":1,\"item_id\":1,\"qty\":1,\"reserved_at_ms\":1}", "unknown version 2" },
        { "{\"v\":1,\"order_id\":1,\"user_id\":1,\"item_id\":1,\"qty\":1,\"reserved_at_ms\":1}", "order_id\" string" },
        { "{\"v\":1,\"order_id\":\"0\",\"user_id\":1,\"item_id\":1,\"qty\":1,\"reserved_at_ms\":1}", "positive" },
        { "{\"v\":1,\"order_id\":\"12x\",\"user_id\":1,\"item_id\":1,\"qty\":1,\"reserved_at_ms\":1}", "positive" },
        { "{\"v\":1,\"order_id\":\"1\",\"user_id\":0,\"item_id\":1,\"qty\":1,\"reserved_at_ms\":1}", "\"user_id\" out of range" },
        { "{\"v\":1,\"order_id\":\"1\",\"user_id\":1,\"item_id\":-1,\"qty\":1,\"reserved_at_ms\":1}", "\"item_id\" out of range" },
        { "{\"v\":1,\"order_id\":\"1\",\"user_id\":1,\"item_id\":1,\"qty\":2,\"reserved_at_ms\":1}", "\"qty\" out of range" },
        { "{\"v\":1,\"order_id\":\"1\",\"user_id\":1,\"item_id\":1,\"qty\":1}", "missing \"reserved_at_ms\"" },
        { "{\"v\":1,\"order_id\":\"1\",\"user_id\":\"1\",\"item_id\":1,\"qty\":1,\"reserved_at_ms\":1}", "\"user_id\" is not an integer" },
        { "{\"v\":1,\"v\":1,\"order_id\":\"1\",\"user_id\":1,\"item_id\":1,\"qty\":1,\"reserved_at_ms\":1}", "bad JSON" },
    };
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        struct order o;
        char err[128] = "";
        if (order_decode(bad[i].msg, strlen(bad[i].msg), &o, err, sizeof(err)) != -1)
            fail_msg("accepted: %s", bad[i].msg);
        if (strstr(err, bad[i].why) == NULL)
            fail_msg("%s: error '%s' does not say '%s'", bad[i].msg, err, bad[i].why);
    }
}

static void test_order_id_make(void **state)
{
    (void)state;
    const int64_t size = INT64_C(1) << ORDER_ID_SEQ_BITS;
    assert_true(order_id_make(1, 0) == size);
    assert_true(order_id_make(2, 5) == 2 * size + 5);
    /* Distinct (block, seq) pairs never give the same id. */
    assert_true(order_id_make(1, size - 1) < order_id_make(2, 0));
    assert_int_equal(order_id_make(0, 0), -1);
    assert_int_equal(order_id_make(1, size), -1);
    assert_int_equal(order_id_make(1, -1), -1);
    assert_int_equal(order_id_make(INT64_C(1) << (63 - ORDER_ID_SEQ_BITS), 0), -1);
    assert_true(order_id_make((INT64_C(1) << (63 - ORDER_ID_SEQ_BITS)) - 1, size - 1) == INT64_MAX);
}

static void test_generator_switches_blocks(void **state)
{
    (void)state;
    const int64_t size = INT64_C(1) << ORDER_ID_SEQ_BITS;
    static struct oid_gen g;
    int64_t id = 0;
    oid_init(&g, 7);
    for (int64_t i = 0; i < size / 2; i++)
        assert_true(oid_next(&g) == order_id_make(7, i));
    assert_int_equal(atomic_load(&g.want_spare), 0);
    id = oid_next(&g); /* half way: the next block is asked for */
    assert_true(id == order_id_make(7, size / 2));
    assert_int_equal(atomic_load(&g.want_spare), 1);
    while (g.seq < size)
        assert_true(oid_next(&g) > id && (id = g.seq) >= 0);
    /* Used up without a spare: no id is invented. */
    assert_int_equal(oid_next(&g), -1);
    atomic_store(&g.spare, 9);
    assert_true(oid_next(&g) == order_id_make(9, 0));
    assert_true(oid_next(&g) == order_id_make(9, 1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_decode_rejects),
        cmocka_unit_test(test_cancel_kind),
        cmocka_unit_test(test_order_id_make),
        cmocka_unit_test(test_generator_switches_blocks),
    };
    return cmocka_run_group_tests_name("order", tests, NULL, NULL);
}
