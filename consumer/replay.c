#include "replay.h"

#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cmetrics.h"
#include "dlq.h"
#include "inmsg.h"
#include "kconf.h"
#include "kmeta.h"
#include "log.h"
#include "queue.h"
#include "util.h"
#include "worker.h"

/* One partition's share of the replay: offsets [from, to). */
struct rpart {
    int64_t from, to;
    int64_t read, inserted, present, rejected, dead;
    int64_t cancelled, cancel_noop; /* buyers' cancels: applied, changed nothing */
    int64_t inflight;
    bool reading; /* still messages below `to` to fetch */
};

struct replay {
    struct cfg *cfg;
    const struct replay_opts *opts;
    rd_kafka_t *rk;
    struct queue done;
    bool done_init;
    struct dlq *dlq;
    struct wk_pool *pool;
    struct cmsg *dlq_retry;
    struct rpart *parts;
    int32_t nparts;
    int64_t total;    /* messages in range */
    int64_t read, settled, inflight;
    _Atomic int fatal;
};

static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    struct replay *r = opaque;
    if (kconf_fatal(rk, err, &r->fatal))
        return;
    log_debug("kafka: %s: %s", rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

/* --- planning ------------------------------------------------------------- */

/* Decide [from, to) per partition; the end is fixed now, so orders produced
 * during the replay are left to the live consumers. */
static int plan(struct replay *r, char *err, size_t errlen)
{
    int64_t *lo = NULL, *hi = NULL, *at = NULL;
    int ret = -1;
    if (kmeta_partitions(r->rk, r->cfg->kafka.topic, KMETA_TIMEOUT_MS, &r->nparts, err, errlen) != 0)
        return -1;
    size_t n = (size_t)r->nparts;
    if (!(r->parts = calloc(n, sizeof(*r->parts))) || !(lo = calloc(n, sizeof(*lo))) ||
        !(hi = calloc(n, sizeof(*hi))) || !(at = calloc(n, sizeof(*at)))) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (kmeta_range(r->rk, r->cfg->kafka.topic, r->nparts, KMETA_TIMEOUT_MS, lo, hi, err, errlen) != 0)
        goto fail;
    for (int32_t i = 0; i < r->nparts; i++) {
        r->parts[i].from = lo[i];
        r->parts[i].to = hi[i];
    }
    if (r->opts->from_ms >= 0) {
        if (kmeta_offsets_at(r->rk, r->cfg->kafka.topic, r->nparts, KMETA_TIMEOUT_MS, r->opts->from_ms, at,
                             err, errlen) != 0)
            goto fail;
        for (int32_t i = 0; i < r->nparts; i++)
            r->parts[i].from = at[i] < 0 ? r->parts[i].to : util_max_i64(at[i], r->parts[i].from);
    }
    if (r->opts->to_ms >= 0) {
        if (kmeta_offsets_at(r->rk, r->cfg->kafka.topic, r->nparts, KMETA_TIMEOUT_MS, r->opts->to_ms, at, err,
                             errlen) != 0)
            goto fail;
        for (int32_t i = 0; i < r->nparts; i++)
            if (at[i] >= 0 && at[i] < r->parts[i].to)
                r->parts[i].to = at[i];
    }
    for (int32_t i = 0; i < r->nparts; i++) {
        struct rpart *p = &r->parts[i];
        p->reading = p->from < p->to;
        if (p->reading)
            r->total += p->to - p->from;
    }
    ret = 0;
fail:
    free(lo);
    free(hi);
    free(at);
    return ret;
}

static int assign(struct replay *r, char *err, size_t errlen)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(r->nparts);
    if (!l) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int32_t i = 0; i < r->nparts; i++)
        if (r->parts[i].reading)
            rd_kafka_topic_partition_list_add(l, r->cfg->kafka.topic, i)->offset = r->parts[i].from;
    rd_kafka_resp_err_t e = rd_kafka_assign(r->rk, l);
    rd_kafka_topic_partition_list_destroy(l);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
        snprintf(err, errlen, "kafka: assign: %s", rd_kafka_err2str(e));
        return -1;
    }
    return 0;
}

/* --- reading --------------------------------------------------------------- */

/* A partition read up to `to`: nothing past it is wanted, so fetching it
 * stops (what was prefetched beyond goes with the pause). */
static void finish_reading(struct replay *r, int32_t part)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    r->parts[part].reading = false;
    if (!l)
        return;
    rd_kafka_topic_partition_list_add(l, r->cfg->kafka.topic, part);
    rd_kafka_resp_err_t e = rd_kafka_pause_partitions(r->rk, l);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
        log_warn("kafka: pause partition %" PRId32 ": %s", part, rd_kafka_err2str(e));
    rd_kafka_topic_partition_list_destroy(l);
}

static void handle(struct replay *r, rd_kafka_message_t *km)
{
    char err[256];
    struct rpart *p;
    struct cmsg *m;
    bool known = km->partition >= 0 && km->partition < r->nparts;
    p = known ? &r->parts[km->partition] : NULL;
    if (km->err) {
        /* The end of a partition whose last offsets hold no message (a
         * transaction marker, compaction) also ends its range. */
        if (km->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            if (p && p->reading && km->offset >= p->to)
                finish_reading(r, km->partition);
        } else if (!kconf_fatal(r->rk, km->err, &r->fatal)) {
            log_warn("kafka: %s", rd_kafka_message_errstr(km));
        }
        return;
    }
    if (!p || !p->reading || km->offset >= p->to)
        return;
    if (!(m = calloc(1, sizeof(*m)))) {
        log_error("out of memory at %s[%" PRId32 "]@%" PRId64, r->cfg->kafka.topic, km->partition,
                  km->offset);
        atomic_store(&r->fatal, 1);
        return;
    }
    p->read++;
    r->read++;
    p->inflight++;
    r->inflight++;
    m->partition = km->partition;
    m->offset = km->offset;
    if (inmsg_decode(km, m, err, sizeof(err)) == 0) {
        wk_dispatch(r->pool, m);
    } else if (inmsg_keep_raw(km, m, err) != 0) {
        free(m);
        log_error("out of memory at %s[%" PRId32 "]@%" PRId64, r->cfg->kafka.topic, km->partition,
                  km->offset);
        atomic_store(&r->fatal, 1);
        return;
    } else if (dlq_send(r->dlq, m) != 0) {
        m->next = r->dlq_retry;
        r->dlq_retry = m;
    }
    if (km->offset + 1 >= p->to)
        finish_reading(r, km->partition);
}

static void settle(struct replay *r)
{
    struct cmsg *m = q_take_all(&r->done);
    while (m) {
        struct cmsg *n = m->next;
        struct rpart *p = &r->parts[m->partition];
        switch (m->outcome) {
        case CMSG_INSERTED: p->inserted++; break;
        case CMSG_DUPLICATE:
        case CMSG_REFUSED_BEFORE: p->present++; break; /* settled before: in orders, or refused */
        case CMSG_DEAD_LETTER: p->dead++; break;
        case CMSG_CANCELLED: p->cancelled++; break;
        case CMSG_CANCEL_NOOP: p->cancel_noop++; break;
        default: p->rejected++; break;
        }
        p->inflight--;
        r->inflight--;
        r->settled++;
        cmsg_free(m);
        m = n;
    }
}

/* How many more messages the workers may be given now. Past
 * consumer.max_pending the loop stops polling instead of pausing: a pause
 * throws away what librdkafka prefetched and fetches it again on resume
 * (pipeline.c). Without a group subscription nothing has to be polled in
 * the meantime. */
static int64_t room(const struct replay *r)
{
    int64_t left = CFG_GET(r->cfg->consumer.max_pending) - r->inflight;
    return left > 0 ? left : 0;
}

static bool reading(const struct replay *r)
{
    for (int32_t i = 0; i < r->nparts; i++)
        if (r->parts[i].reading)
            return true;
    return false;
}

/* --- lifecycle ------------------------------------------------------------- */

static int open_consumer(struct replay *r, char *err, size_t errlen)
{
    static const char *const defaults[] = { NULL };
    char kerr[512], group[300];
    rd_kafka_conf_t *conf = kconf_new(r->cfg, &r->cfg->kafka.consumer_properties, defaults, err, errlen);
    if (!conf)
        return -1;
    /* A group id of its own that never joins or commits: librdkafka wants
     * one, and the live group must not see this reader at all. */
    snprintf(group, sizeof(group), "%s.replay", r->cfg->consumer.group_id);
    if (kconf_set(conf, "group.id", group, err, errlen) != 0 ||
        kconf_set(conf, "enable.auto.commit", "false", err, errlen) != 0 ||
        kconf_set(conf, "enable.auto.offset.store", "false", err, errlen) != 0 ||
        kconf_set(conf, "enable.partition.eof", "true", err, errlen) != 0) {
        rd_kafka_conf_destroy(conf);
        return -1;
    }
    rd_kafka_conf_set_opaque(conf, r);
    rd_kafka_conf_set_error_cb(conf, error_cb);
    if (!(r->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, kerr, sizeof(kerr)))) {
        rd_kafka_conf_destroy(conf);
        snprintf(err, errlen, "kafka consumer: %s", kerr);
        return -1;
    }
    kconf_track(r->rk);
    rd_kafka_poll_set_consumer(r->rk);
    return 0;
}

static void describe_range(const struct replay *r, char *buf, size_t len)
{
    char a[40] = "the beginning", b[40] = "the end";
    if (r->opts->from_ms >= 0)
        util_format_time_ms(r->opts->from_ms, a, sizeof(a));
    if (r->opts->to_ms >= 0)
        util_format_time_ms(r->opts->to_ms, b, sizeof(b));
    snprintf(buf, len, "from %s to %s", a, b);
}

static void summary(const struct replay *r, FILE *out, int64_t elapsed_ms, bool complete)
{
    char range[128];
    struct rpart t = { 0 };
    describe_range(r, range, sizeof(range));
    fprintf(out, "replay of %s %s: %s\n", r->cfg->kafka.topic, range,
            complete ? "complete" : "INTERRUPTED (settled orders stay; run it again to finish)");
    /* The cancels' columns come last: readers of the first five stay right. */
    fprintf(out, "%9s %12s %12s %10s %10s %10s %10s %13s %10s %12s\n", "partition", "from", "to", "read",
            "inserted", "present", "rejected", "dead-lettered", "cancelled", "cancel-noop");
    for (int32_t i = 0; i < r->nparts; i++) {
        const struct rpart *p = &r->parts[i];
        fprintf(out, "%9" PRId32 " %12" PRId64 " %12" PRId64 " %10" PRId64 " %10" PRId64 " %10" PRId64
                     " %10" PRId64 " %13" PRId64 " %10" PRId64 " %12" PRId64 "\n",
                i, p->from, p->to, p->read, p->inserted, p->present, p->rejected, p->dead, p->cancelled,
                p->cancel_noop);
        t.read += p->read;
        t.inserted += p->inserted;
        t.present += p->present;
        t.rejected += p->rejected;
        t.dead += p->dead;
        t.cancelled += p->cancelled;
        t.cancel_noop += p->cancel_noop;
    }
    fprintf(out,
            "%9s %12s %12s %10" PRId64 " %10" PRId64 " %10" PRId64 " %10" PRId64 " %13" PRId64 " %10" PRId64
            " %12" PRId64 "\n",
            "total", "", "", t.read, t.inserted, t.present, t.rejected, t.dead, t.cancelled, t.cancel_noop);
    fprintf(out, "%" PRId64 " messages in %.1f s (%.0f/s)\n", t.read, (double)elapsed_ms / 1000.0,
            elapsed_ms > 0 ? (double)t.read * 1000.0 / (double)elapsed_ms : 0.0);
}

static void close_replay(struct replay *r)
{
    if (r->pool) {
        wk_pool_abandon(r->pool);
        wk_pool_close(r->pool);
    }
    if (r->rk) {
        rd_kafka_resp_err_t e = rd_kafka_consumer_close(r->rk);
        if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
            log_warn("kafka: consumer close: %s", rd_kafka_err2str(e));
        kconf_untrack(r->rk);
        rd_kafka_destroy(r->rk);
    }
    if (r->dlq)
        dlq_close(r->dlq, 10000);
    cmsg_free_list(r->dlq_retry);
    if (r->done_init)
        q_destroy(&r->done);
    free(r->parts);
}

int replay_run(struct cfg *c, const struct replay_opts *o, volatile sig_atomic_t *stop_signals, FILE *out)
{
    struct replay r = { .cfg = c, .opts = o };
    char err[1024];
    int64_t start = util_mono_ms(), next_progress = start + o->progress_ms;
    bool complete = false;
    int ret = 1;

    if (strcmp(c->kafka.topic, c->kafka.dlq_topic) == 0) {
        snprintf(err, sizeof(err), "kafka.dlq_topic must differ from kafka.topic");
        goto fail;
    }
    if (q_init(&r.done) != 0) {
        snprintf(err, sizeof(err), "out of memory");
        goto fail;
    }
    r.done_init = true;
    if (open_consumer(&r, err, sizeof(err)) != 0 || plan(&r, err, sizeof(err)) != 0 ||
        dlq_open(c, c->kafka.topic, &r.done, &r.dlq, err, sizeof(err)) != 0 ||
        wk_pool_open(c, &r.done, r.dlq, &r.pool, err, sizeof(err)) != 0 || assign(&r, err, sizeof(err)) != 0)
        goto fail;
    log_notice("replaying %" PRId64 " messages of %s in %" PRId32 " partitions", r.total, c->kafka.topic,
               r.nparts);

    while (!atomic_load(&r.fatal) && (stop_signals == NULL || *stop_signals == 0)) {
        if (!reading(&r) && r.inflight == 0) {
            complete = true;
            break;
        }
        int64_t max = room(&r);
        if (max > 1000)
            max = 1000;
        if (max > 0) {
            rd_kafka_message_t *km = rd_kafka_consumer_poll(r.rk, reading(&r) ? 100 : 10);
            for (int64_t n = 0; km; km = ++n < max ? rd_kafka_consumer_poll(r.rk, 0) : NULL) {
                handle(&r, km);
                rd_kafka_message_destroy(km);
            }
        } else {
            q_wait(&r.done, 100);
        }
        settle(&r);
        dlq_poll(r.dlq, 0);
        if (r.dlq_retry)
            r.dlq_retry = dlq_send_list(r.dlq, r.dlq_retry);
        if (o->progress_ms > 0 && util_mono_ms() >= next_progress) {
            next_progress = util_mono_ms() + o->progress_ms;
            fprintf(stderr, "replay: %" PRId64 "/%" PRId64 " read (%.0f%%), %" PRId64 " settled\n", r.read,
                    r.total, r.total ? 100.0 * (double)r.read / (double)r.total : 100.0, r.settled);
        }
    }
    if (!complete) {
        /* Interrupted: let the workers finish what they hold, briefly. */
        int64_t end = util_mono_ms() + CFG_GET(c->consumer.drain_timeout_ms);
        wk_pool_finish(r.pool);
        while (r.inflight > 0 && util_mono_ms() < end && (stop_signals == NULL || *stop_signals < 2)) {
            settle(&r);
            dlq_poll(r.dlq, 10);
        }
        settle(&r);
    }
    summary(&r, out, util_mono_ms() - start, complete);
    ret = complete ? 0 : 1;
    close_replay(&r);
    return ret;
fail:
    fprintf(stderr, "seckill-consumer: replay: %s\n", err);
    close_replay(&r);
    return ret;
}
