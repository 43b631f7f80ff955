#include "pipeline.h"

#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmetrics.h"
#include "dlq.h"
#include "inmsg.h"
#include "kconf.h"
#include "kparts.h"
#include "log.h"
#include "offsets.h"
#include "order.h"
#include "queue.h"
#include "util.h"
#include "worker.h"

/* Messages taken per turn before looking at the done queue again. */
#define POLL_BURST 1000

struct pipe {
    struct cfg *cfg;
    rd_kafka_t *rk;
    /* The assigned partitions' messages, apart from the consumer queue
     * (which then carries events only): past consumer.max_pending the poll
     * thread just stops taking from it, and librdkafka stops fetching once
     * its own prefetch limit (queued.max.messages.kbytes) is reached.
     * Pausing instead would throw away everything prefetched (librdkafka
     * purges a paused partition's queue) and fetch it again on resume. */
    rd_kafka_queue_t *msgq;
    rd_kafka_queue_t *partq[CM_MAX_PARTITIONS]; /* our references, while assigned */
    struct off_table *off;
    struct queue done;
    struct dlq *dlq;
    struct wk_pool *pool;
    struct cmsg *dlq_retry; /* dead letters the producer would not queue yet */
    bool paused;
    bool draining;        /* no new work: messages still fetched are left for redelivery */
    bool pool_closed;
    _Atomic int fatal;
    _Atomic int kafka_err; /* last error code reported by the error callback */
    volatile sig_atomic_t *stop_signals;
    int64_t invalid_log_ms;   /* invalid messages: one line per second at most */
    int64_t invalid_quiet;    /* ... and how many went unlogged since */
};

/* --- callbacks ----------------------------------------------------------- */

static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    struct pipe *p = opaque;
    if (kconf_fatal(rk, err, &p->fatal))
        return;
    /* A refusal (wrong password, a certificate that does not verify) or
     * every broker down: down until the statistics show a broker up. */
    if (kconf_refused(err, reason) || err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
        CM_SET(kafka_up, 0);
    /* Refused, every broker is "down" to us: the same state, not news (it
     * would make the refusal's next report look new too). */
    if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN && kconf_refused(atomic_load(&p->kafka_err), NULL))
        return;
    /* librdkafka retries on its own; say so once per kind of error. */
    if (atomic_exchange(&p->kafka_err, err) != err)
        log_warn("kafka: %s: %s", rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

static int stats_cb(rd_kafka_t *rk, char *json, size_t len, void *opaque)
{
    struct pipe *p = opaque;
    (void)rk;
    /* Up again after errors: one line, and the next error is news again. */
    if (cm_stats_parse(json, len, p->cfg->kafka.topic) == 1 && atomic_exchange(&p->kafka_err, 0) != 0)
        log_notice("kafka: a broker connection is up again");
    return 0; /* librdkafka frees json */
}

/* --- settling -------------------------------------------------------------- */

static void drain_done(struct pipe *p)
{
    struct cmsg *m = q_take_all(&p->done);
    int moved = 0;
    while (m) {
        struct cmsg *n = m->next;
        if (m->outcome == CMSG_DEAD_LETTER)
            CM_ADD(dead_lettered, 1);
        if (off_done(p->off, m->partition, m->epoch, m->offset) == 0)
            moved = 1;
        cmsg_free(m);
        m = n;
    }
    if (moved)
        kp_store(p->rk, p->off, p->cfg->kafka.topic, "");
    CM_SET(pending, (int64_t)off_pending(p->off));
}

/* --- pause / resume -------------------------------------------------------- */

static void set_paused(struct pipe *p, bool pause, const char *why)
{
    if (pause == p->paused)
        return;
    rd_kafka_resp_err_t e = kp_pause(p->rk, pause);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
        log_warn("kafka: %s partitions: %s", pause ? "pause" : "resume", rd_kafka_err2str(e));
        return;
    }
    p->paused = pause;
    CM_SET(paused, pause);
    if (pause)
        log_notice("fetching paused: %s", why);
    else
        log_notice("fetching resumed");
}

/* Paused only while a worker cannot reach PostgreSQL or Redis: what was
 * prefetched is dropped then, as nothing could be written anyway. Too much
 * in flight is handled without a pause (room()). */
static void backpressure(struct pipe *p)
{
    bool down = CM_GET(pg_down) > 0 || CM_GET(redis_down) > 0;
    if (p->draining)
        return;
    if (!p->paused && down)
        set_paused(p, true, "PostgreSQL or Redis unavailable");
    else if (p->paused && !down)
        set_paused(p, false, NULL);
}

/* How many more messages the workers may be given now. */
static size_t room(const struct pipe *p)
{
    size_t pending = off_pending(p->off), max = (size_t)CFG_GET(p->cfg->consumer.max_pending);
    if (p->paused || p->draining || pending >= max)
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
    if (!(q = rd_kafka_queue_get_partition(p->rk, p->cfg->kafka.topic, part))) {
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

/* --- rebalance ------------------------------------------------------------- */

/* Wait until the given partitions have nothing in flight, settling what the
 * workers hand back meanwhile; give up at the deadline. */
static void finish_partitions(struct pipe *p, const rd_kafka_topic_partition_list_t *parts, int timeout_ms)
{
    int64_t end = util_mono_ms() + timeout_ms;
    for (;;) {
        size_t left = 0;
        drain_done(p);
        for (int i = 0; i < parts->cnt; i++)
            left += off_inflight(p->off, parts->elems[i].partition);
        if (left == 0)
            return;
        if (p->pool_closed || util_mono_ms() >= end || (p->stop_signals && *p->stop_signals >= 2)) {
            log_warn("revoke: abandoning %zu in-flight messages (redelivered to the next owner)", left);
            return;
        }
        dlq_poll(p->dlq, 5);
        p->dlq_retry = dlq_send_list(p->dlq, p->dlq_retry);
    }
}

/* Store what is settled and commit it, counted. */
static void commit_sync(struct pipe *p)
{
    if (kp_commit(p->rk, p->off, p->cfg->kafka.topic, "") == RD_KAFKA_RESP_ERR_NO_ERROR)
        CM_ADD(offset_commits, 1);
}

static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *parts,
                         void *opaque)
{
    struct pipe *p = opaque;
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        for (int i = 0; i < parts->cnt; i++)
            part_route(p, parts->elems[i].partition);
        kp_assign(rk, p->off, parts, "");
        if (p->paused || p->draining)
            rd_kafka_pause_partitions(rk, parts);
        CM_ADD(assigned, parts->cnt);
        if (parts->cnt > 0)
            log_notice("assigned %d partitions of %s", parts->cnt, p->cfg->kafka.topic);
    } else {
        bool lost = rd_kafka_assignment_lost(rk);
        if (err == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS && !lost) {
            /* Finish what is in flight for these partitions and commit it, so
             * the next owner starts exactly where we stopped. */
            finish_partitions(p, parts, CFG_GET(p->cfg->consumer.drain_timeout_ms));
            commit_sync(p);
        } else {
            log_warn("partitions lost (%s): their in-flight work is left for the next owner",
                     rd_kafka_err2str(err));
        }
        kp_unassign(rk, p->off, parts, "");
        for (int i = 0; i < parts->cnt; i++)
            part_unroute(p, parts->elems[i].partition);
        CM_ADD(assigned, -parts->cnt);
        CM_SET(pending, (int64_t)off_pending(p->off));
        if (parts->cnt > 0)
            log_notice("revoked %d partitions of %s", parts->cnt, p->cfg->kafka.topic);
    }
}

/* --- messages -------------------------------------------------------------- */

static void handle(struct pipe *p, rd_kafka_message_t *km)
{
    char err[256];
    struct cmsg *m;
    if (km->err) {
        if (km->err == RD_KAFKA_RESP_ERR__PARTITION_EOF)
            return;
        /* With the main queue forwarded to the consumer, a fatal error comes
         * here and not to error_cb (a static member fenced by its own
         * rejoin, for one). The instance can no longer consume: stop, and
         * let the service manager start a fresh one. */
        if (kconf_fatal(p->rk, km->err, &p->fatal))
            return;
        if (atomic_exchange(&p->kafka_err, km->err) != km->err)
            log_warn("kafka: %s", rd_kafka_message_errstr(km));
        return;
    }
    CM_ADD(consumed, 1);
    /* A message fetched after the stop began is left for redelivery: it is
     * not tracked, so no stored offset can pass it. */
    if (p->draining)
        return;
    if (!(m = calloc(1, sizeof(*m))))
        goto oom;
    m->partition = km->partition;
    m->offset = km->offset;
    if (off_track(p->off, km->partition, km->offset, &m->epoch) != 0) {
        free(m); /* a partition no longer ours */
        return;
    }
    if (inmsg_decode(km, m, err, sizeof(err)) == 0) {
        wk_dispatch(p->pool, m);
        return;
    }
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
        goto oom;
    }
    if (dlq_send(p->dlq, m) != 0) {
        m->next = p->dlq_retry;
        p->dlq_retry = m;
    }
    return;
oom:
    log_error("out of memory at %s[%" PRId32 "]@%" PRId64, p->cfg->kafka.topic, km->partition, km->offset);
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
    char kerr[512];
    rd_kafka_conf_t *conf = NULL;
    rd_kafka_topic_partition_list_t *sub = NULL;
    rd_kafka_resp_err_t e;
    struct pipe *p = calloc(1, sizeof(*p));
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    p->cfg = c;
    p->invalid_log_ms = INT64_MIN / 2;
    if (q_init(&p->done) != 0 || off_open(&p->off) != 0) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (strcmp(c->kafka.topic, c->kafka.dlq_topic) == 0) {
        /* every dead letter would come back as a new invalid message */
        snprintf(err, errlen, "kafka.dlq_topic must differ from kafka.topic");
        goto fail;
    }
    if (dlq_open(c, &p->done, &p->dlq, err, errlen) != 0)
        goto fail;
    if (wk_pool_open(c, &p->done, p->dlq, &p->pool, err, errlen) != 0)
        goto fail;

    if (!(conf = kconf_new(c, &c->kafka.consumer_properties, pipe_defaults, err, errlen)))
        goto fail;
    if (kconf_set(conf, "group.id", c->consumer.group_id, err, errlen) != 0 ||
        kconf_set(conf, "partition.assignment.strategy", KP_ASSIGNOR, err, errlen) != 0 ||
        kconf_set(conf, "enable.auto.offset.store", "false", err, errlen) != 0 ||
        (c->consumer.instance_id[0] &&
         kconf_set(conf, "group.instance.id", c->consumer.instance_id, err, errlen) != 0))
        goto fail;
    rd_kafka_conf_set_opaque(conf, p);
    rd_kafka_conf_set_error_cb(conf, error_cb);
    rd_kafka_conf_set_stats_cb(conf, stats_cb);
    rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
    if (!(p->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, kerr, sizeof(kerr)))) {
        snprintf(err, errlen, "kafka consumer: %s", kerr);
        goto fail;
    }
    conf = NULL; /* owned by rk now */
    kconf_track(p->rk);
    rd_kafka_poll_set_consumer(p->rk);
    if (!(p->msgq = rd_kafka_queue_new(p->rk))) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (!(sub = rd_kafka_topic_partition_list_new(1))) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    rd_kafka_topic_partition_list_add(sub, c->kafka.topic, RD_KAFKA_PARTITION_UA);
    if ((e = rd_kafka_subscribe(p->rk, sub)) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        snprintf(err, errlen, "kafka subscribe %s: %s", c->kafka.topic, rd_kafka_err2str(e));
        goto fail;
    }
    rd_kafka_topic_partition_list_destroy(sub);
    *out = p;
    return 0;
fail:
    if (sub)
        rd_kafka_topic_partition_list_destroy(sub);
    if (conf)
        rd_kafka_conf_destroy(conf);
    pipe_close(p);
    return -1;
}

int pipe_poll(struct pipe *p, int timeout_ms)
{
    size_t n = 0, max;
    rd_kafka_message_t *km;
    /* Events (rebalances, errors, statistics) are served whatever is in
     * flight; messages come here only from a partition that is not routed. */
    while (n++ < POLL_BURST && (km = rd_kafka_consumer_poll(p->rk, 0))) {
        handle(p, km);
        rd_kafka_message_destroy(km);
    }
    /* Messages while the workers have room; else wait for one to report. */
    if ((max = room(p)) > 0) {
        if (max > POLL_BURST)
            max = POLL_BURST;
        km = rd_kafka_consume_queue(p->msgq, timeout_ms);
        for (n = 0; km; km = ++n < max ? rd_kafka_consume_queue(p->msgq, 0) : NULL) {
            handle(p, km);
            rd_kafka_message_destroy(km);
        }
    } else {
        q_wait(&p->done, timeout_ms);
    }
    drain_done(p);
    dlq_poll(p->dlq, 0);
    if (p->dlq_retry)
        p->dlq_retry = dlq_send_list(p->dlq, p->dlq_retry);
    backpressure(p);
    return pipe_fatal(p) ? -1 : 0;
}

int pipe_drain(struct pipe *p, int timeout_ms, volatile sig_atomic_t *stop_signals)
{
    int64_t end = util_mono_ms() + timeout_ms;
    int ret = 0;
    p->stop_signals = stop_signals;
    /* Stop fetching; what librdkafka already holds is left for redelivery. */
    set_paused(p, true, "stopping");
    p->draining = true;
    wk_pool_finish(p->pool);
    log_notice("stopping: finishing %zu in-flight messages (up to %d ms)", off_pending(p->off), timeout_ms);
    for (;;) {
        drain_done(p);
        if (off_pending(p->off) == 0)
            break;
        if (stop_signals && *stop_signals >= 2)
            return -1;
        if (util_mono_ms() >= end) {
            log_warn("stopping: drain timeout, abandoning %zu in-flight messages (redelivered after restart)",
                     off_pending(p->off));
            ret = 1;
            break;
        }
        dlq_poll(p->dlq, 10);
        if (p->dlq_retry)
            p->dlq_retry = dlq_send_list(p->dlq, p->dlq_retry);
    }
    wk_pool_abandon(p->pool);
    wk_pool_close(p->pool);
    p->pool = NULL;
    p->pool_closed = true;
    drain_done(p);
    commit_sync(p);
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
    kp_close(p->rk, "");
    if (p->dlq)
        dlq_close(p->dlq, 10000);
    cmsg_free_list(p->dlq_retry);
    if (p->off)
        off_close(p->off);
    q_destroy(&p->done);
    free(p);
}

bool pipe_fatal(const struct pipe *p)
{
    return atomic_load(&p->fatal) != 0 || (p->dlq && dlq_fatal(p->dlq));
}

int pipe_healthy(const struct pipe *p)
{
    return !pipe_fatal(p) && CM_GET(pg_down) == 0 && CM_GET(redis_down) == 0;
}
