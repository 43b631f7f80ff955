#include "pipeline.h"

#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmetrics.h"
#include "inmsg.h"
#include "kloop.h"
#include "log.h"
#include "queue.h"
#include "util.h"
#include "worker.h"

/* Messages taken per turn before looking at the done queue again. */
#define POLL_BURST 1000

struct pipe {
    struct cfg *cfg;
    struct kloop *k; /* the consumer, its offsets, its dead letters (kloop.h) */
    /* The assigned partitions' messages, apart from the consumer queue
     * (which then carries events only): past consumer.max_pending the poll
     * thread just stops taking from it, and librdkafka stops fetching once
     * its own prefetch limit (queued.max.messages.kbytes) is reached.
     * Pausing instead would throw away everything prefetched (librdkafka
     * purges a paused partition's queue) and fetch it again on resume. */
    rd_kafka_queue_t *msgq;
    rd_kafka_queue_t *partq[CM_MAX_PARTITIONS]; /* our references, while assigned */
    struct wk_pool *pool;
    bool draining;        /* no new work: messages still fetched are left for redelivery */
    bool pool_closed;
    volatile sig_atomic_t *stop_signals;
    int64_t invalid_log_ms;   /* invalid messages: one line per second at most */
    int64_t invalid_quiet;    /* ... and how many went unlogged since */
};

/* --- settling -------------------------------------------------------------- */

/* What the workers settled and the dead letters the broker took: their
 * offsets done. */
static void drain_done(struct pipe *p)
{
    kl_drain(p->k);
    CM_SET(pending, (int64_t)kl_pending(p->k));
}

/* --- pause / resume -------------------------------------------------------- */

/* Paused only while a worker cannot reach PostgreSQL or Redis: what was
 * prefetched is dropped then, as nothing could be written anyway. Too much
 * in flight is handled without a pause (room()). */
static void backpressure(struct pipe *p)
{
    bool down = CM_GET(pg_down) > 0 || CM_GET(redis_down) > 0;
    if (!p->draining)
        kl_pause(p->k, down, "PostgreSQL or Redis unavailable");
}

/* How many more messages the workers may be given now. */
static size_t room(const struct pipe *p)
{
    size_t pending = kl_pending(p->k), max = (size_t)CFG_GET(p->cfg->consumer.max_pending);
    if (kl_paused(p->k) || p->draining || pending >= max)
        return 0;
    return max - pending;
}

/* --- partition queues ------------------------------------------------------ */

/* Route a partition's messages to msgq; called before the partition is
 * assigned, since librdkafka leaves a queue the application has forwarded
 * as it is when it starts fetching (and forwards any other to the consumer
 * queue). A partition past CM_MAX_PARTITIONS, or whose queue cannot be had,
 * stays on the consumer queue: consumed as before, only not held back by
 * consumer.max_pending. */
static void part_route(struct pipe *p, int32_t part)
{
    rd_kafka_queue_t *q;
    /* no msgq: closing (an assignment can still arrive during the close) */
    if (!p->msgq || part < 0 || part >= CM_MAX_PARTITIONS || p->partq[part])
        return;
    if (!(q = rd_kafka_queue_get_partition(kl_rk(p->k), p->cfg->kafka.topic, part))) {
        log_warn("kafka: no queue for %s[%" PRId32 "]: consumed without the max_pending limit",
                 p->cfg->kafka.topic, part);
        return;
    }
    rd_kafka_queue_forward(q, p->msgq);
    p->partq[part] = q;
}

/* Drop our reference once the partition is unassigned (librdkafka has then
 * undone the forwarding and purged what was left for it). */
static void part_unroute(struct pipe *p, int32_t part)
{
    if (part < 0 || part >= CM_MAX_PARTITIONS || !p->partq[part])
        return;
    rd_kafka_queue_destroy(p->partq[part]);
    p->partq[part] = NULL;
}

/* --- rebalance (kloop's hooks) ------------------------------------------------ */

static void route_assigned(void *arg, const rd_kafka_topic_partition_list_t *parts)
{
    for (int i = 0; i < parts->cnt; i++)
        part_route(arg, parts->elems[i].partition);
}

/* Wait until the given partitions have nothing in flight, settling what the
 * workers hand back meanwhile; give up at the deadline. */
static void finish_revoked(void *arg, const rd_kafka_topic_partition_list_t *parts)
{
    struct pipe *p = arg;
    int64_t end = util_mono_ms() + CFG_GET(p->cfg->consumer.drain_timeout_ms);
    for (;;) {
        size_t left = 0;
        drain_done(p);
        for (int i = 0; i < parts->cnt; i++)
            left += kl_inflight(p->k, parts->elems[i].partition);
        if (left == 0)
            return;
        if (p->pool_closed || util_mono_ms() >= end || (p->stop_signals && *p->stop_signals >= 2)) {
            log_warn("revoke: abandoning %zu in-flight messages (redelivered to the next owner)", left);
            return;
        }
        kl_serve(p->k, 5);
    }
}

static void unroute_revoked(void *arg, const rd_kafka_topic_partition_list_t *parts)
{
    struct pipe *p = arg;
    for (int i = 0; i < parts->cnt; i++)
        part_unroute(p, parts->elems[i].partition);
    CM_SET(pending, (int64_t)kl_pending(p->k));
}

/* --- messages -------------------------------------------------------------- */

/* An invalid message: said (one line per second at most), then to the
 * dead-letter topic. */
static void invalid(struct pipe *p, const rd_kafka_message_t *km, struct cmsg *m, const char *err)
{
    if (util_mono_ms() - p->invalid_log_ms >= 1000) {
        log_warn("%s[%" PRId32 "]@%" PRId64 ": invalid message, dead-lettered: %s (%" PRId64
                 " more since the last report)",
                 p->cfg->kafka.topic, km->partition, km->offset, err, p->invalid_quiet);
        p->invalid_log_ms = util_mono_ms();
        p->invalid_quiet = 0;
    } else {
        p->invalid_quiet++;
    }
    if (inmsg_keep_raw(km, m, err) != 0) {
        /* tracked and never settled: the watermark holds, nothing is lost */
        cmsg_free(m);
        log_error("out of memory at %s[%" PRId32 "]@%" PRId64, p->cfg->kafka.topic, km->partition,
                  km->offset);
        return;
    }
    kl_letter(p->k, m);
}

/* A message fetched: to its user's worker, or to the dead-letter topic. */
static bool take_order(void *arg, const rd_kafka_message_t *km)
{
    struct pipe *p = arg;
    char err[256];
    struct cmsg *m;
    CM_ADD(consumed, 1);
    /* A message fetched after the stop began is left for redelivery: it is
     * not tracked, so no stored offset can pass it. */
    if (p->draining)
        return true;
    if (!(m = calloc(1, sizeof(*m)))) {
        log_error("out of memory at %s[%" PRId32 "]@%" PRId64, p->cfg->kafka.topic, km->partition,
                  km->offset);
        return true;
    }
    m->partition = km->partition;
    m->offset = km->offset;
    if (kl_track(p->k, km->partition, km->offset, &m->epoch) != 0) {
        free(m); /* a partition no longer ours */
        return true;
    }
    if (inmsg_decode(km, m, err, sizeof(err)) == 0)
        wk_dispatch(p->pool, m);
    else
        invalid(p, km, m, err);
    return true;
}

/* --- lifecycle ------------------------------------------------------------- */

/* The consumer's librdkafka settings unless kafka.consumer_properties says otherwise. */
static const char *const pipe_defaults[] = {
    "auto.offset.reset", "earliest", /* a new group must not skip orders */
    "enable.auto.commit", "true",    /* commits what we stored, nothing more */
    "auto.commit.interval.ms", "1000",
    "statistics.interval.ms", "5000", /* consumer_lag for /metrics */
    /* Let the broker gather up to 10 ms of orders per fetch instead of
     * answering each as soon as one order is there: in the whole sale
     * (bench/wholesale) a fetch per few orders cost the broker more CPU
     * than the consumer itself. 10 ms is small beside the batch linger. */
    "fetch.min.bytes", "100000",
    "fetch.wait.max.ms", "10",
    NULL,
};

int pipe_open(struct cfg *c, struct pipe **out, char *err, size_t errlen)
{
    struct pipe *p = calloc(1, sizeof(*p));
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    p->cfg = c;
    p->invalid_log_ms = INT64_MIN / 2;
    const struct kl_conf kc = {
        .topic = c->kafka.topic, .group = c->consumer.group_id, .who = "", .defaults = pipe_defaults,
        .brokers = true, .assigned = &cm.assigned, .letters = &cm.dead_lettered, .paused = &cm.paused,
        .commits = &cm.offset_commits, .letters_close_ms = 10000,
        .hooks = { .arg = p, .take = take_order, .assigning = route_assigned, .finishing = finish_revoked,
                   .revoked = unroute_revoked },
    };
    /* The workers before the group is joined: they are what its messages go to. */
    if (kl_open(c, &kc, &p->k, err, errlen) != 0 ||
        wk_pool_open(c, kl_done_queue(p->k), kl_dlq(p->k), &p->pool, err, errlen) != 0)
        goto fail;
    if (!(p->msgq = rd_kafka_queue_new(kl_rk(p->k)))) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (kl_subscribe(p->k, err, errlen) != 0)
        goto fail;
    *out = p;
    return 0;
fail:
    pipe_close(p);
    return -1;
}

int pipe_poll(struct pipe *p, int timeout_ms)
{
    size_t max;
    /* Events (rebalances, errors, statistics) are served whatever is in
     * flight; messages come here only from a partition that is not routed. */
    kl_fetch(p->k, NULL, 0, POLL_BURST);
    /* Messages while the workers have room; else wait for one to report. */
    if ((max = room(p)) > 0)
        kl_fetch(p->k, p->msgq, timeout_ms, max < POLL_BURST ? max : POLL_BURST);
    else
        q_wait(kl_done_queue(p->k), timeout_ms);
    drain_done(p);
    kl_serve(p->k, 0);
    backpressure(p);
    return pipe_fatal(p) ? -1 : 0;
}

int pipe_drain(struct pipe *p, int timeout_ms, volatile sig_atomic_t *stop_signals)
{
    int64_t end = util_mono_ms() + timeout_ms;
    int ret = 0;
    p->stop_signals = stop_signals;
    /* Stop fetching; what librdkafka already holds is left for redelivery. */
    kl_stop_fetching(p->k);
    p->draining = true;
    wk_pool_finish(p->pool);
    log_notice("stopping: finishing %zu in-flight messages (up to %d ms)", kl_pending(p->k), timeout_ms);
    for (;;) {
        drain_done(p);
        if (kl_pending(p->k) == 0)
            break;
        if (stop_signals && *stop_signals >= 2)
            return -1;
        if (util_mono_ms() >= end) {
            log_warn("stopping: drain timeout, abandoning %zu in-flight messages (redelivered after restart)",
                     kl_pending(p->k));
            ret = 1;
            break;
        }
        kl_serve(p->k, 10);
    }
    wk_pool_abandon(p->pool);
    wk_pool_close(p->pool);
    p->pool = NULL;
    p->pool_closed = true;
    drain_done(p);
    kl_commit(p->k);
    return ret;
}

void pipe_close(struct pipe *p)
{
    if (!p)
        return;
    if (p->pool) {
        wk_pool_abandon(p->pool);
        wk_pool_close(p->pool);
        p->pool = NULL;
    }
    p->pool_closed = true;
    /* Queue references go before the consumer closes (rdkafka.h). */
    for (int32_t i = 0; i < CM_MAX_PARTITIONS; i++)
        part_unroute(p, i);
    if (p->msgq)
        rd_kafka_queue_destroy(p->msgq);
    p->msgq = NULL;
    kl_close(p->k);
    free(p);
}

bool pipe_fatal(const struct pipe *p)
{
    return kl_fatal(p->k);
}

int pipe_healthy(const struct pipe *p)
{
    return !pipe_fatal(p) && CM_GET(pg_down) == 0 && CM_GET(redis_down) == 0;
}
