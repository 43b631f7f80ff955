/* bench/kafkaconnect: what a new Kafka client costs before it can do
 * anything: from a fresh client handle (kmeta_open: kconf_new with the
 * configuration's security settings, so the same TLS and SCRAM as the
 * programs) to the first metadata answer for the configured topic (TCP
 * connect, with sasl_ssl the TLS handshake and the SCRAM exchange,
 * ApiVersions, Metadata). Each CONFIG names a broker and a way to it; the
 * configurations take turns, one handle at a time, so that whatever else
 * the machine does falls on all of them alike. The first round is not
 * counted: it pays the process's one-time costs (librdkafka's and OpenSSL's
 * initialisation), which a daemon pays once at start. Destroying a handle
 * is not counted either. Prints "key value" lines per NAME:
 * kafka_connect_NAME_ms (median), _mean_ms, _p90_ms, _max_ms, and
 * kafka_connect_rounds.
 *   build/bench/kafkaconnect ROUNDS NAME CONFIG [NAME CONFIG...]   (bench/kafkasec runs it) */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cfg.h"
#include "kmeta.h"
#include "log.h"
#include "util.h"

#define MAX_CONFIGS 4
#define METADATA_TIMEOUT_MS 10000

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* One fresh client to its first metadata answer, in µs; -1 with err. */
static int64_t connect_once(const struct cfg *c, char *err, size_t errlen)
{
    const struct rd_kafka_metadata *md = NULL;
    int64_t t0 = now_us(), took = -1;
    rd_kafka_t *rk = kmeta_open(c, NULL, err, errlen);
    if (!rk)
        return -1;
    rd_kafka_topic_t *t = rd_kafka_topic_new(rk, c->kafka.topic, NULL);
    if (!t) {
        snprintf(err, errlen, "topic handle: %s", rd_kafka_err2str(rd_kafka_last_error()));
        goto done;
    }
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, t, &md, METADATA_TIMEOUT_MS);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
        snprintf(err, errlen, "metadata of %s from %s: %s", c->kafka.topic, c->kafka.brokers, rd_kafka_err2str(e));
    else if (md->topic_cnt != 1 || md->topics[0].err || md->topics[0].partition_cnt <= 0)
        snprintf(err, errlen, "topic %s on %s: %s", c->kafka.topic, c->kafka.brokers,
                 md->topic_cnt == 1 && md->topics[0].err ? rd_kafka_err2str(md->topics[0].err) : "no partitions");
    else
        took = now_us() - t0;
    if (md)
        rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(t);
done:
    rd_kafka_destroy(rk);
    return took;
}

int main(int argc, char **argv)
{
    struct cfg c[MAX_CONFIGS] = { 0 };
    int64_t *us[MAX_CONFIGS] = { 0 }, rounds;
    int n = (argc - 2) / 2, ret = 1;
    char err[512];

    if (argc < 4 || (argc - 2) % 2 != 0 || n > MAX_CONFIGS || util_parse_i64(argv[1], 1, 100000, &rounds) != 0) {
        fprintf(stderr, "usage: kafkaconnect ROUNDS NAME CONFIG [NAME CONFIG...] (at most %d)\n", MAX_CONFIGS);
        return 2;
    }
    log_setup("kafkaconnect", LOG_LVL_WARNING, LOG_FMT_PLAIN);
    for (int j = 0; j < n; j++) {
        if (cfg_load(argv[3 + 2 * j], &c[j], err, sizeof(err)) != 0) {
            fprintf(stderr, "kafkaconnect: %s\n", err);
            goto fail;
        }
        if (!(us[j] = calloc((size_t)rounds, sizeof(*us[j])))) {
            fprintf(stderr, "kafkaconnect: out of memory\n");
            goto fail;
        }
    }
    for (int64_t i = -1; i < rounds; i++)
        for (int j = 0; j < n; j++) {
            int64_t t = connect_once(&c[j], err, sizeof(err));
            if (t < 0) {
                fprintf(stderr, "kafkaconnect: %s: %s\n", argv[2 + 2 * j], err);
                goto fail;
            }
            if (i >= 0)
                us[j][i] = t;
        }
    for (int j = 0; j < n; j++) {
        const char *name = argv[2 + 2 * j];
        int64_t sum = 0;
        qsort(us[j], (size_t)rounds, sizeof(*us[j]), cmp_i64);
        for (int64_t i = 0; i < rounds; i++)
            sum += us[j][i];
        printf("kafka_connect_%s_ms %.2f\n", name, (double)us[j][rounds / 2] / 1000.0);
        printf("kafka_connect_%s_mean_ms %.2f\n", name, (double)sum / (double)rounds / 1000.0);
        printf("kafka_connect_%s_p90_ms %.2f\n", name, (double)us[j][rounds * 9 / 10] / 1000.0);
        printf("kafka_connect_%s_max_ms %.2f\n", name, (double)us[j][rounds - 1] / 1000.0);
    }
    printf("kafka_connect_rounds %" PRId64 "\n", rounds);
    ret = 0;
fail:
    for (int j = 0; j < MAX_CONFIGS; j++) { /* (cfg_free takes an empty cfg) */
        free(us[j]);
        cfg_free(&c[j]);
    }
    return ret;
}
