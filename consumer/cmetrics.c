#include "cmetrics.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "queue.h"
#include "rconn.h"
#include "util.h"

struct cmetrics cm;

static const int64_t batch_le[CM_BATCH_BUCKETS] = { 1, 10, 50, 100, 250, 500, 1000, 2500, 5000, 10000 };

void cm_init(void)
{
    memset(&cm, 0, sizeof(cm));
    for (size_t i = 0; i < CM_MAX_PARTITIONS; i++)
        atomic_store(&cm.lag[i], -1);
}

void cm_batch_observe(int64_t n)
{
    size_t i = 0;
    while (i < CM_BATCH_BUCKETS && n > batch_le[i])
        i++;
    atomic_fetch_add_explicit(&cm.batch_bucket[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&cm.batch_count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&cm.batch_sum, (uint64_t)n, memory_order_relaxed);
}

_Atomic int64_t *cm_outcome_counter(int outcome)
{
    switch (outcome) {
#define CM_OUTCOME(name, reason, metric, refusal, status) \
    case CMSG_##name: return metric;
        CMSG_OUTCOMES(CM_OUTCOME)
#undef CM_OUTCOME
    default: return NULL;
    }
}

void cm_count_outcome(int outcome)
{
    _Atomic int64_t *c = cm_outcome_counter(outcome);
    if (c)
        atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

int cm_stats_parse(const char *json, size_t len, const char *topic)
{
    json_error_t jerr;
    json_t *root = json_loadb(json, len, 0, &jerr);
    json_t *parts = json_object_get(json_object_get(json_object_get(root, "topics"), topic), "partitions");
    json_t *brokers = json_object_get(root, "brokers");
    json_t *rx = json_object_get(root, "rxmsgs");
    const char *k;
    json_t *v;
    int up = 0, ret = -1;
    if (!json_is_object(brokers))
        goto out;
    /* Brokers learned from metadata (nodeid >= 0; the bootstrap entries are
     * -1) in state UP: connected and, with SASL, authenticated. */
    json_object_foreach(brokers, k, v) {
        json_t *id = json_object_get(v, "nodeid"), *st = json_object_get(v, "state");
        if (json_is_integer(id) && json_integer_value(id) >= 0 && json_is_string(st) &&
            strcmp(json_string_value(st), "UP") == 0)
            up = 1;
    }
    CM_SET(kafka_up, up);
    ret = up;
    if (json_is_integer(rx))
        CM_SET(fetched, json_integer_value(rx));
    if (!json_is_object(parts))
        goto out;
    json_object_foreach(parts, k, v) {
        int64_t p, lag;
        json_t *jl = json_object_get(v, "consumer_lag");
        json_t *desired = json_object_get(v, "desired");
        /* "-1" is librdkafka's internal unassigned partition. */
        if (util_parse_i64(k, 0, CM_MAX_PARTITIONS - 1, &p) != 0 || !json_is_integer(jl))
            continue;
        lag = json_integer_value(jl);
        if (json_is_false(desired))
            lag = -1;
        atomic_store_explicit(&cm.lag[p], lag, memory_order_relaxed);
    }
out:
    json_decref(root);
    return ret;
}

static void render_batch(struct mbuf *b)
{
    const char *name = "seckill_consumer_batch_size";
    uint64_t cum = 0;
    metrics_family(b, name, "histogram", "Orders per PostgreSQL transaction");
    for (size_t i = 0; i < CM_BATCH_BUCKETS; i++) {
        cum += atomic_load_explicit(&cm.batch_bucket[i], memory_order_relaxed);
        mbuf_printf(b, "%s_bucket{le=\"%lld\"} %llu\n", name, (long long)batch_le[i],
                    (unsigned long long)cum);
    }
    cum += atomic_load_explicit(&cm.batch_bucket[CM_BATCH_BUCKETS], memory_order_relaxed);
    mbuf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    mbuf_printf(b, "%s_sum %llu\n%s_count %llu\n", name,
                (unsigned long long)atomic_load_explicit(&cm.batch_sum, memory_order_relaxed), name,
                (unsigned long long)atomic_load_explicit(&cm.batch_count, memory_order_relaxed));
}

void cm_render(struct mbuf *b)
{
    const char *prev = "";
#define CM_X(m, name, labels, type, help) metrics_list_sample(b, &prev, name, type, help, labels, CM_GET(m));
    CM_METRICS(CM_X)
#undef CM_X
    metrics_family(b, "seckill_consumer_pg_up", "gauge", "1 when every worker reaches PostgreSQL");
    metrics_sample(b, "seckill_consumer_pg_up", NULL, CM_GET(pg_down) == 0);
    metrics_family(b, "seckill_consumer_redis_up", "gauge", "1 when every worker reaches Redis");
    metrics_sample(b, "seckill_consumer_redis_up", NULL, CM_GET(redis_down) == 0);
    metrics_family(
        b, "seckill_consumer_redis_primary_moves_total", "counter",
        "Times the Redis primary moved (Sentinel switch or a READONLY reply): connections reopened");
    metrics_sample(b, "seckill_consumer_redis_primary_moves_total", NULL, (int64_t)rconn_primary_moves());

#define CM_X(m, name, help)                                                                        \
    {                                                                                              \
        uint64_t sum = 0;                                                                          \
        for (size_t w = 0; w < CM_MAX_WORKERS; w++)                                                \
            sum += atomic_load_explicit(&cm.lock[w].m, memory_order_relaxed);                      \
        metrics_family(b, name, "counter", help);                                                  \
        metrics_sample(b, name, NULL, (int64_t)sum);                                               \
    }
    CM_LOCK_COUNTERS(CM_X)
#undef CM_X

    render_batch(b);
    metrics_family(b, "seckill_consumer_lock_wait_seconds", "histogram",
                   "Time to lock the users of a batch (one round trip per attempt)");
    metrics_hist_write(b, "seckill_consumer_lock_wait_seconds", NULL, &cm.lock_wait);
    metrics_family(b, "seckill_consumer_txn_seconds", "histogram",
                   "PostgreSQL transaction latency per batch");
    metrics_hist_write(b, "seckill_consumer_txn_seconds", NULL, &cm.txn);

    metrics_family(b, "seckill_consumer_lag", "gauge",
                   "Messages behind the partition's high watermark (librdkafka statistics)");
    for (int p = 0; p < CM_MAX_PARTITIONS; p++) {
        char lab[32];
        int64_t lag = atomic_load_explicit(&cm.lag[p], memory_order_relaxed);
        if (lag < 0)
            continue;
        snprintf(lab, sizeof(lab), "partition=\"%d\"", p);
        metrics_sample(b, "seckill_consumer_lag", lab, lag);
    }
}
