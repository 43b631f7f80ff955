/* The payments held (consumer/paywait.h) without a stack: when a payment
 * whose order is not there is looked for again (doubling to a second, one
 * last look when consumer.payment_wait_ms is over, then no more), the
 * waiting set's two bounds (consumer.payment_wait_max payments, and its
 * bytes: the payment waiting longest is dead-lettered to make room, counted
 * as payments_wait_full), what a turn says (the gauge, the next look), and
 * the payments of partitions taken away dropped. Dead letters go through a
 * consumer loop whose brokers nothing listens on (test_kloop.c): queued,
 * never acknowledged, freed at its close. The look-up against PostgreSQL is
 * in tests/it/test_payments.c. */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

#include "cmetrics.h"
#include "kloop.h"
#include "paywait.h"

static struct cfg test_cfg(void)
{
    struct cfg c;
    harness_cfg_no_broker(&c, "sktest-paywait", "sktest-paywait.dlq");
    c.consumer.payment_wait_ms = 300000;
    c.consumer.payment_wait_max = 3;
    return c;
}

static bool take(void *arg, const rd_kafka_message_t *km)
{
    (void)arg;
    (void)km;
    return true;
}

/* w, empty, its dead letters through a loop of its own (*k). */
static void setup(const struct cfg *c, struct kloop **k, struct pw *w)
{
    char err[256];
    const struct kl_conf kc = { .topic = c->kafka.payments_topic, .group = "sktest-paywait", .who = "test: ",
                                .assigned = &cm.payments_assigned, .letters = &cm.payments_dead_letter,
                                .letters_close_ms = 100, .hooks = { .take = take } };
    if (kl_open(c, &kc, k, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    pw_init(w, c, *k, NULL, NULL);
}

/* A payment as pw_take leaves it, with a message of len bytes. */
static struct pay *pay(int32_t partition, int64_t order, size_t len, int64_t now)
{
    struct pay *y = calloc(1, sizeof(*y));
    assert_non_null(y);
    y->partition = partition;
    y->offset = order;
    y->m.order_id = order;
    y->m.user_id = 1;
    y->payload = calloc(1, len ? len : 1);
    y->payload_len = len;
    y->first_ms = y->due_ms = now;
    y->slot = y->first_kind = -1;
    assert_non_null(y->payload);
    return y;
}

static void test_looked_for_again(void **state)
{
    (void)state;
    struct cfg c = test_cfg();
    struct pay y = { .first_ms = 1000 };
    int64_t want[] = { 1050, 1150, 1350, 1750, 2550, 3550, 4550 }, now = 1000;
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        assert_true(pw_wait_more(&c, &y, now));
        assert_int_equal(y.due_ms, want[i]); /* 50 ms, doubling, to a second */
        now = y.due_ms;
    }
    /* the last look when the wait is over, then none */
    c.consumer.payment_wait_ms = 5000;
    y = (struct pay){ .first_ms = 0, .tries = 5 };
    now = 4900;
    assert_true(pw_wait_more(&c, &y, now));
    assert_int_equal(y.due_ms, 5000);
    assert_false(pw_wait_more(&c, &y, 5000));
}

static void test_bound_by_count(void **state)
{
    (void)state;
    struct cfg c = test_cfg();
    struct kloop *k;
    struct pw w;
    int64_t full0 = CM_GET(payments_wait_full);
    setup(&c, &k, &w);
    for (int64_t o = 1; o <= 4; o++)
        pw_wait_add(&w, pay(0, o, 10, 100 * o));
    assert_int_equal(w.wait.n, 3);
    assert_int_equal(w.wait.head->m.order_id, 2); /* the one waiting longest made room */
    assert_int_equal(CM_GET(payments_wait_full) - full0, 1);
    assert_true(kl_letters_out(k)); /* dead-lettered, not dropped */
    assert_true(w.wait_due <= 200); /* the thread is back by the first waiting one's look */
    assert_int_equal(pw_held(&w), 0); /* waiting payments are not held for the pause */
    pw_free(&w);
    kl_close(k);
}

static void test_bound_by_bytes(void **state)
{
    (void)state;
    struct cfg c = test_cfg();
    struct kloop *k;
    struct pw w;
    c.consumer.payment_wait_max = 1000;
    setup(&c, &k, &w);
    w.wait_bytes_max = 2 * (sizeof(struct pay) + 1000) + 10;
    pw_wait_add(&w, pay(0, 1, 1000, 1));
    pw_wait_add(&w, pay(0, 2, 1000, 2));
    assert_int_equal(w.wait.n, 2);
    assert_int_equal(w.wait.bytes, 2 * (sizeof(struct pay) + 1000));
    pw_wait_add(&w, pay(0, 3, 1000, 3));
    assert_int_equal(w.wait.n, 2);
    assert_int_equal(w.wait.head->m.order_id, 2);
    /* one larger than the whole bound still waits, alone */
    pw_wait_add(&w, pay(0, 4, 3000, 4));
    assert_int_equal(w.wait.n, 1);
    assert_int_equal(w.wait.head->m.order_id, 4);
    pw_free(&w);
    kl_close(k);
}

static void test_turn_and_drop(void **state)
{
    (void)state;
    struct cfg c = test_cfg();
    struct kloop *k;
    struct pw w;
    setup(&c, &k, &w);
    assert_int_equal(pw_after_turn(&w, false), INT64_MAX);
    assert_int_equal(CM_GET(payments_waiting), 0);
    pw_wait_add(&w, pay(0, 1, 10, 500));
    pw_wait_add(&w, pay(1, 2, 10, 300));
    pw_wait_add(&w, pay(1, 3, 10, 400));
    assert_int_equal(pw_after_turn(&w, false), 300);
    assert_int_equal(CM_GET(payments_waiting), 3);
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(parts, c.kafka.payments_topic, 1);
    pw_drop(&w, parts);
    rd_kafka_topic_partition_list_destroy(parts);
    assert_int_equal(w.wait.n, 1);
    assert_int_equal(w.wait.head->m.order_id, 1);
    assert_int_equal(CM_GET(payments_waiting), 1);
    assert_false(kl_letters_out(k)); /* dropped, the next owner's: no letter */
    pw_free(&w);
    kl_close(k);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_looked_for_again),
        cmocka_unit_test(test_bound_by_count),
        cmocka_unit_test(test_bound_by_bytes),
        cmocka_unit_test(test_turn_and_drop),
    };
    return cmocka_run_group_tests_name("paywait", tests, NULL, NULL);
}
