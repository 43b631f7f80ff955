/* The stack's Kafka broker: topics exist, and librdkafka's idempotent
 * producer is really active against it (with a broker too new for Debian's
 * librdkafka, idempotence would be silently unavailable). */
#include "harness.h"

#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char stats[65536];
static pthread_mutex_t stats_mu = PTHREAD_MUTEX_INITIALIZER;


static int stats_cb(rd_kafka_t *rk, char *json, size_t len, void *opaque)
{
    (void)rk, (void)opaque;
    pthread_mutex_lock(&stats_mu);
    snprintf(stats, sizeof(stats), "%.*s", (int)len, json);
    pthread_mutex_unlock(&stats_mu);
    return 0;
}

static rd_kafka_t *new_producer(void)
{
    char err[512];
    rd_kafka_conf_t *conf = harness_kafka_conf(&harness_conf, "admin");
    const struct cfg_props *sets[] = { &harness_conf.kafka.properties, &harness_conf.kafka.producer_properties };
    for (size_t s = 0; s < 2; s++)
        for (size_t i = 0; i < sets[s]->n; i++)
            assert_int_equal(rd_kafka_conf_set(conf, sets[s]->keys[i], sets[s]->values[i], err, sizeof(err)),
                             RD_KAFKA_CONF_OK);
    assert_int_equal(rd_kafka_conf_set(conf, "bootstrap.servers", harness_conf.kafka.brokers, err, sizeof(err)), RD_KAFKA_CONF_OK);
    assert_int_equal(rd_kafka_conf_set(conf, "enable.idempotence", "true", err, sizeof(err)), RD_KAFKA_CONF_OK);
    assert_int_equal(rd_kafka_conf_set(conf, "statistics.interval.ms", "100", err, sizeof(err)), RD_KAFKA_CONF_OK);
    rd_kafka_conf_set_stats_cb(conf, stats_cb);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (rk == NULL)
        fail_msg("rd_kafka_new: %s", err);
    return rk;
}

static bool stats_have(const char *needle)
{
    pthread_mutex_lock(&stats_mu);
    bool found = strstr(stats, needle) != NULL;
    pthread_mutex_unlock(&stats_mu);
    return found;
}

static void test_idempotent_producer_active(void **state)
{
    (void)state;
    rd_kafka_t *rk = new_producer();
    /* The idempotent producer asks the broker for a producer id at start;
     * the "eos" block of the statistics shows the state and the id. */
    bool assigned;
    WAIT_UNTIL((rd_kafka_poll(rk, 50), stats_have("\"idemp_state\": \"Assigned\"")), 30000, assigned);
    assert_true(assigned);
    pthread_mutex_lock(&stats_mu);
    const char *p = strstr(stats, "\"producer_id\": ");
    assert_non_null(p);
    long long pid = strtoll(p + strlen("\"producer_id\": "), NULL, 10);
    pthread_mutex_unlock(&stats_mu);
    assert_true(pid >= 0);
    /* no fatal error was raised (e.g. idempotence unsupported by the broker) */
    char err[256];
    assert_int_equal(rd_kafka_fatal_error(rk, err, sizeof(err)), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_destroy(rk);
}

static void test_topics_exist(void **state)
{
    (void)state;
    rd_kafka_t *rk = new_producer();
    const rd_kafka_metadata_t *md = NULL;
    assert_int_equal(rd_kafka_metadata(rk, 1, NULL, &md, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
    int orders = -1, dlq = -1;
    for (int i = 0; i < md->topic_cnt; i++) {
        if (strcmp(md->topics[i].topic, harness_conf.kafka.topic) == 0 && md->topics[i].err == 0)
            orders = md->topics[i].partition_cnt;
        if (strcmp(md->topics[i].topic, harness_conf.kafka.dlq_topic) == 0 && md->topics[i].err == 0)
            dlq = md->topics[i].partition_cnt;
    }
    rd_kafka_metadata_destroy(md);
    assert_true(orders > 1); /* several partitions: consumers scale by them */
    assert_true(dlq >= 1);
    rd_kafka_destroy(rk);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idempotent_producer_active),
        cmocka_unit_test(test_topics_exist),
    };
    return cmocka_run_group_tests_name("kafka", tests, harness_setup, harness_teardown);
}
