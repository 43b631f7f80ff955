/* The consumer loop (consumer/kloop.h) without a broker: a consumer made
 * and never subscribed, its brokers an address nothing listens on. What it
 * refuses (a dead-letter topic that is the topic read), its pause (the
 * gauge, said once per change, and a stop that stays), its offsets (a
 * message of a partition not assigned is not tracked), its dead letters (a
 * letter not acknowledged is out, and the close frees it: LeakSanitizer
 * says otherwise), and a fetch that finds nothing. The loop against a
 * broker is in tests/it/test_consumer.c and test_payments.c. */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

#include "cmetrics.h"
#include "kloop.h"
#include "util.h"

static bool take(void *arg, const rd_kafka_message_t *km)
{
    (void)km;
    ++*(int *)arg;
    return true;
}

/* A loop on sktest-kloop (its dead letters to dlq), not subscribed; NULL
 * when kl_open refused, its words in err. */
static struct kloop *open_loop(const char *dlq, int *taken, char *err, size_t errlen)
{
    static const char *const defaults[] = { "reconnect.backoff.max.ms", "1000", NULL };
    static struct cfg c;
    struct kloop *k = NULL;
    harness_cfg_no_broker(&c, "sktest-kloop", dlq);
    const struct kl_conf kc = { .topic = "sktest-kloop", .group = "sktest-kloop", .who = "test: ",
                                .defaults = defaults, .assigned = &cm.assigned, .letters = &cm.dead_lettered,
                                .paused = &cm.paused, .letters_close_ms = 100,
                                .hooks = { .arg = taken, .take = take } };
    return kl_open(&c, &kc, &k, err, errlen) == 0 ? k : NULL;
}

static struct kloop *loop(int *taken)
{
    char err[256];
    struct kloop *k = open_loop("sktest-kloop.dlq", taken, err, sizeof(err));
    if (!k)
        fail_msg("%s", err);
    return k;
}

static void test_dlq_topic_must_differ(void **state)
{
    (void)state;
    char err[256] = "";
    int taken = 0;
    assert_null(open_loop("sktest-kloop", &taken, err, sizeof(err)));
    assert_non_null(strstr(err, "kafka.dlq_topic must differ from sktest-kloop"));
}

static void test_pause_and_stop(void **state)
{
    (void)state;
    int taken = 0;
    CM_SET(paused, 0);
    struct kloop *k = loop(&taken);
    assert_false(kl_paused(k));
    kl_pause(k, true, "a test");
    assert_true(kl_paused(k));
    assert_int_equal(CM_GET(paused), 1);
    kl_pause(k, false, NULL);
    assert_false(kl_paused(k));
    assert_int_equal(CM_GET(paused), 0);
    kl_stop_fetching(k);
    assert_true(kl_paused(k));
    kl_pause(k, false, NULL); /* a stop stays */
    assert_true(kl_paused(k));
    assert_int_equal(CM_GET(paused), 1);
    assert_false(kl_fatal(k));
    kl_close(k);
    CM_SET(paused, 0);
}

static void test_offsets_and_fetch(void **state)
{
    (void)state;
    int taken = 0;
    uint32_t epoch;
    struct kloop *k = loop(&taken);
    /* nothing assigned: a message of partition 0 is not ours */
    assert_int_equal(kl_track(k, 0, 10, &epoch), -1);
    assert_int_equal(kl_pending(k), 0);
    int64_t t0 = util_mono_ms();
    assert_int_equal(kl_fetch(k, NULL, 50, 10), 0);
    assert_true(util_mono_ms() - t0 < 5000);
    assert_int_equal(taken, 0);
    kl_store(k); /* nothing moved: nothing stored, and no crash */
    kl_drain(k);
    kl_close(k);
}

/* A dead letter no broker takes: out until the close, which frees it. */
static void test_letter_out_until_close(void **state)
{
    (void)state;
    int taken = 0;
    struct cmsg *m = calloc(1, sizeof(*m));
    assert_non_null(m);
    m->payload = strdup("{}");
    m->payload_len = 2;
    m->key = strdup("1");
    m->key_len = 1;
    m->error = strdup("a test");
    struct kloop *k = loop(&taken);
    assert_false(kl_letters_out(k));
    kl_letter(k, m);
    assert_true(kl_letters_out(k));
    kl_serve(k, 0);
    kl_drain(k);
    assert_true(kl_letters_out(k)); /* never acknowledged */
    kl_close(k);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dlq_topic_must_differ),
        cmocka_unit_test(test_pause_and_stop),
        cmocka_unit_test(test_offsets_and_fetch),
        cmocka_unit_test(test_letter_out_until_close),
    };
    return cmocka_run_group_tests_name("kloop", tests, NULL, NULL);
}
