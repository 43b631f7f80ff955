/* bench/kafkalimit: Kafka's own produce limit for our orders on this broker,
 * the ceiling under the accepted path (issue 15, part 2). It produces through
 * the producer's own publish module (common/kafka/publish.c: the configured
 * kafka.properties and kafka.producer_properties, so linger.ms=5 and lz4 as
 * in config/seckill.cfg, enable.idempotence=true hence acks=all) messages
 * that order_encode() writes, shaped like the real ones (a 63-bit order id,
 * a random user id as the key, a 9-digit item id, the wall clock), to TOPIC,
 * with no HTTP and no Redis in front.
 *
 * Two runs of SECONDS each, every message counted only when its delivery
 * report says it was acknowledged:
 *   - at most producer.max_inflight messages outstanding (the bound the
 *     producer itself puts on requests in flight): as fast as the delivery
 *     reports let it go, kafka_limit_rps;
 *   - at most 64 outstanding: what 64 HTTP connections can have in flight,
 *     since the producer answers a buy only after its ack, kafka_limit_64_rps.
 * A message's latency is from rd_kafka_produce() to its delivery report
 * (linger, compression, the broker's ack, the report's hop to the poll
 * thread). The first WARMUP_MS of each run (the idempotent producer's id,
 * connections, the topic's metadata) is not counted.
 * Other bounds can be named after SECONDS instead (kafka_limit_N_* each;
 * 1 gives one message's own produce-to-ack time: linger.ms plus the
 * broker's ack). Prints "key value" lines. TOPIC must exist
 * (bench/kafkalimit.sh makes a fresh one with seckill.orders' partitions
 * and deletes it after).
 *   build/bench/kafkalimit CONFIG TOPIC [SECONDS [INFLIGHT...]]   (10; the two above) */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cfg.h"
#include "log.h"
#include "order.h"
#include "publish.h"
#include "util.h"

#define WARMUP_MS 1000
/* Delivery latency histogram: 10 µs buckets up to 10 s, the last one for
 * anything later (the producer's message.timeout.ms is 5 s). */
#define HIST_STEP_US 10
#define HIST_BUCKETS 1000001
/* What a request that cannot be queued (QUEUE_FULL) waits before trying
 * again: the local queue drains as reports come back. */
#define QUEUE_FULL_WAIT_MS 1

struct slot {
    struct pub_ticket ticket; /* first: the report hands back its address */
    struct run *run;
    int64_t sent_us;
    int idx;
};

struct run {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct slot *slots;
    int *free_idx; /* a stack of free slots */
    int nfree;
    int cap;
    int64_t from_us, until_us; /* the measured window */
    int64_t ok, failed, counted;
    uint32_t *hist;
    char first_err[128];
};

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* On the poll thread: record the report and give the slot back. */
static void on_done(struct pub_ticket *t, rd_kafka_resp_err_t err, rd_kafka_msg_status_t status)
{
    struct slot *s = (struct slot *)t;
    struct run *r = s->run;
    int64_t at_us = now_us(), lat_us = at_us - s->sent_us;
    (void)status;
    pthread_mutex_lock(&r->mu);
    if (err) {
        r->failed++;
        if (!r->first_err[0])
            snprintf(r->first_err, sizeof(r->first_err), "%s", rd_kafka_err2name(err));
    } else if (at_us >= r->from_us && at_us < r->until_us) {
        /* Rate: acks that arrive inside the window; latency: those sent in it. */
        r->ok++;
    }
    if (!err && s->sent_us >= r->from_us && s->sent_us < r->until_us) {
        int64_t b = lat_us / HIST_STEP_US;
        r->hist[b < HIST_BUCKETS - 1 ? b : HIST_BUCKETS - 1]++;
        r->counted++;
    }
    r->free_idx[r->nfree++] = s->idx;
    /* The sender waits for a free slot, the drain for all of them. */
    if (r->nfree == 1 || r->nfree == r->cap)
        pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* Latency in ms at percentile p of the counted reports. */
static double pct_ms(const struct run *r, double p)
{
    int64_t want = (int64_t)((double)r->counted * p / 100.0), seen = 0;
    for (int64_t b = 0; b < HIST_BUCKETS; b++) {
        seen += r->hist[b];
        if (seen > want)
            return (double)((b + 1) * HIST_STEP_US) / 1000.0;
    }
    return 0;
}

/* One run: up to cap messages outstanding for run_s seconds after the warm-up.
 * Prints its figures under name. 0, or -1 (a message failed). */
static int measure(struct pub *p, const char *name, int cap, int64_t run_s, int64_t item_id)
{
    struct run r = { .cap = cap };
    char msg[ORDER_MSG_MAX];
    int64_t seq = 0, sent = 0, block = 1 + (int64_t)util_rand_below(1000);
    int ret = -1;

    pthread_mutex_init(&r.mu, NULL);
    util_cond_init_mono(&r.cv);
    r.slots = calloc((size_t)cap, sizeof(*r.slots));
    r.free_idx = calloc((size_t)cap, sizeof(*r.free_idx));
    r.hist = calloc(HIST_BUCKETS, sizeof(*r.hist));
    if (!r.slots || !r.free_idx || !r.hist) {
        fprintf(stderr, "kafkalimit: out of memory\n");
        goto fail;
    }
    for (int i = 0; i < cap; i++) {
        r.slots[i] = (struct slot){ { on_done }, &r, 0, i };
        r.free_idx[r.nfree++] = i;
    }
    int64_t start = now_us();
    r.from_us = start + WARMUP_MS * 1000;
    r.until_us = r.from_us + run_s * 1000000;
    for (;;) {
        pthread_mutex_lock(&r.mu);
        while (r.nfree == 0 && now_us() < r.until_us) {
            struct timespec dl = util_deadline_ts(100);
            pthread_cond_timedwait(&r.cv, &r.mu, &dl);
        }
        int idx = r.nfree ? r.free_idx[--r.nfree] : -1;
        pthread_mutex_unlock(&r.mu);
        if (idx < 0 || now_us() >= r.until_us) {
            if (idx >= 0) {
                pthread_mutex_lock(&r.mu);
                r.free_idx[r.nfree++] = idx;
                pthread_mutex_unlock(&r.mu);
            }
            break;
        }
        struct slot *s = &r.slots[idx];
        if (++seq >= (INT64_C(1) << ORDER_ID_SEQ_BITS))
            block++, seq = 0;
        /* A user id as random as the buyers' (bench/post.lua: 1..2e9): the key
         * spreads the messages over the partitions as real orders do. */
        struct order o = { order_id_make(block, seq), 1 + (int64_t)util_rand_below(2000000000), item_id, 1,
                           util_wall_ms() };
        int len = order_encode(&o, msg, sizeof(msg));
        s->sent_us = now_us();
        rd_kafka_resp_err_t e;
        while ((e = pub_send(p, o.user_id, msg, (size_t)len, &s->ticket)) == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            util_sleep_ms(QUEUE_FULL_WAIT_MS);
            s->sent_us = now_us();
        }
        if (e) {
            fprintf(stderr, "kafkalimit: produce: %s\n", rd_kafka_err2str(e));
            goto drain;
        }
        sent++;
    }
    ret = 0;
drain:
    /* Every report comes back before the run's memory goes: the slots are in
     * librdkafka's hands until then (message.timeout.ms bounds the wait). */
    pthread_mutex_lock(&r.mu);
    while (r.nfree < cap) {
        struct timespec dl = util_deadline_ts(100);
        pthread_cond_timedwait(&r.cv, &r.mu, &dl);
    }
    pthread_mutex_unlock(&r.mu);
    if (r.failed) {
        fprintf(stderr, "kafkalimit: %s: %" PRId64 " messages failed (first: %s)\n", name, r.failed,
                r.first_err);
        ret = -1;
    }
    printf("%s_rps %.0f\n", name, (double)r.ok / (double)run_s);
    printf("%s_p50_ms %.2f\n%s_p99_ms %.2f\n%s_p999_ms %.2f\n", name, pct_ms(&r, 50), name, pct_ms(&r, 99),
           name, pct_ms(&r, 99.9));
    printf("%s_inflight %d\n%s_sent %" PRId64 "\n", name, cap, name, sent);
    fflush(stdout);
fail:
    free(r.hist);
    free(r.free_idx);
    free(r.slots);
    pthread_cond_destroy(&r.cv);
    pthread_mutex_destroy(&r.mu);
    return ret;
}

int main(int argc, char **argv)
{
    struct cfg c = { 0 };
    struct pub *p = NULL;
    char err[512], *topic = NULL;
    int64_t run_s = 10;
    int ret = 1;

    int64_t caps[16];
    int ncaps = 0;
    if (argc < 3 || argc > 4 + 16 || (argc > 3 && util_parse_i64(argv[3], 1, 3600, &run_s) != 0)) {
        fprintf(stderr, "usage: kafkalimit CONFIG TOPIC [SECONDS [INFLIGHT...]]\n");
        return 2;
    }
    for (int i = 4; i < argc; i++)
        if (util_parse_i64(argv[i], 1, 1000000, &caps[ncaps++]) != 0) {
            fprintf(stderr, "kafkalimit: INFLIGHT %s: not in 1..1000000\n", argv[i]);
            return 2;
        }
    if (cfg_load(argv[1], &c, err, sizeof(err)) != 0) {
        fprintf(stderr, "kafkalimit: %s\n", err);
        goto fail;
    }
    log_setup("kafkalimit", LOG_LVL_WARNING, LOG_FMT_PLAIN);
    /* The bench's topic in place of the configured one, freed by cfg_free. */
    if (!(topic = strdup(argv[2]))) {
        fprintf(stderr, "kafkalimit: out of memory\n");
        goto fail;
    }
    free(c.kafka.topic);
    c.kafka.topic = topic;
    if (pub_open(&c, &p, err, sizeof(err)) != 0) {
        fprintf(stderr, "kafkalimit: %s\n", err);
        goto fail;
    }
    if (!pub_ping(p, 10000)) {
        fprintf(stderr, "kafkalimit: topic %s: no metadata from %s\n", argv[2], c.kafka.brokers);
        goto fail;
    }
    char probe[ORDER_MSG_MAX];
    struct order o = { order_id_make(500, 123456), 1234567890, 800012345, 1, util_wall_ms() };
    printf("kafka_limit_msg_bytes %d\n", order_encode(&o, probe, sizeof(probe)));
    /* The order matters little; the unbounded run first, so the 64 run does
     * not pay for connections and metadata on its own. */
    if (ncaps == 0) {
        if (measure(p, "kafka_limit", c.producer.max_inflight, run_s, 800012345) != 0 ||
            measure(p, "kafka_limit_64", 64, run_s, 800012345) != 0)
            goto fail;
    }
    for (int i = 0; i < ncaps; i++) {
        char name[40];
        snprintf(name, sizeof(name), "kafka_limit_%" PRId64, caps[i]);
        if (measure(p, name, (int)caps[i], run_s, 800012345) != 0)
            goto fail;
    }
    ret = 0;
fail:
    if (p)
        pub_close(p, 10000);
    cfg_free(&c);
    return ret;
}
