#include "kloop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmetrics.h"
#include "kconf.h"
#include "kparts.h"
#include "log.h"
#include "offsets.h"

struct kloop {
    const struct cfg *cfg;
    struct kl_conf conf;
    rd_kafka_t *rk;
    struct off_table *off;
    struct queue done; /* dead letters the broker took, and what the owner's lenders report */
    bool done_init;
    struct dlq *dlq;
    struct cmsg *retry; /* dead letters the producer would not queue yet */
    bool paused, stopping;
    _Atomic int fatal;
    _Atomic int kafka_err; /* the last error the error callback said */
    struct log_repeat say_fetch, say_pause;
};

/* --- librdkafka's callbacks ----------------------------------------------------- */

static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    struct kloop *k = opaque;
    const char *who = k->conf.who, *name = rd_kafka_err2name((rd_kafka_resp_err_t)err);
    /* A refusal (wrong password, a certificate that does not verify) or
     * every broker down: down until the statistics show a broker up. */
    bool link = kconf_refused(err, reason) || err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN;
    if (kconf_fatal(rk, err, &k->fatal))
        return;
    if (!k->conf.brokers && (link || err == RD_KAFKA_RESP_ERR__TRANSPORT)) {
        log_debug("%skafka: %s: %s", who, name, reason); /* the brokers' news is the other consumer's */
        return;
    }
    if (link)
        CM_SET(kafka_up, 0);
    /* Refused, every broker is "down" to us: the same state, not news (it
     * would make the refusal's next report look new too). */
    if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN && kconf_refused(atomic_load(&k->kafka_err), NULL))
        return;
    /* librdkafka retries on its own; say so once per kind of error. */
    if (atomic_exchange(&k->kafka_err, err) != err)
        log_warn("%skafka: %s: %s", who, name, reason);
}

static int stats_cb(rd_kafka_t *rk, char *json, size_t len, void *opaque)
{
    struct kloop *k = opaque;
    (void)rk;
    /* Up again after errors: one line, and the next error is news again. */
    if (cm_stats_parse(json, len, k->conf.topic) == 1 && atomic_exchange(&k->kafka_err, 0) != 0)
        log_notice("%skafka: a broker connection is up again", k->conf.who);
    return 0; /* librdkafka frees json */
}

static void rebalance_assign(struct kloop *k, rd_kafka_topic_partition_list_t *parts)
{
    const struct kl_hooks *h = &k->conf.hooks;
    if (h->assigning)
        h->assigning(h->arg, parts);
    kp_assign(k->rk, k->off, parts, k->conf.who);
    if (k->paused || k->stopping)
        rd_kafka_pause_partitions(k->rk, parts);
    atomic_fetch_add(k->conf.assigned, parts->cnt);
    if (parts->cnt > 0)
        log_notice("%sassigned %d partitions of %s", k->conf.who, parts->cnt, k->conf.topic);
}

static void rebalance_revoke(struct kloop *k, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *parts)
{
    const struct kl_hooks *h = &k->conf.hooks;
    if (err == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS && !rd_kafka_assignment_lost(k->rk)) {
        /* Finish what is in flight for these partitions and commit it, so
         * the next owner starts exactly where we stopped. */
        if (h->finishing)
            h->finishing(h->arg, parts);
        kl_commit(k);
    } else {
        log_warn("%spartitions lost (%s): their in-flight work is left for the next owner", k->conf.who,
                 rd_kafka_err2str(err));
    }
    kp_unassign(k->rk, k->off, parts, k->conf.who);
    if (h->revoked)
        h->revoked(h->arg, parts);
    atomic_fetch_add(k->conf.assigned, -parts->cnt);
    if (parts->cnt > 0)
        log_notice("%srevoked %d partitions of %s", k->conf.who, parts->cnt, k->conf.topic);
}

static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *parts,
                         void *opaque)
{
    (void)rk;
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS)
        rebalance_assign(opaque, parts);
    else
        rebalance_revoke(opaque, err, parts);
}

/* --- open and close ------------------------------------------------------------ */

/* The consumer, its settings and callbacks. 0, or -1 with err. */
static int consumer_new(struct kloop *k, char *err, size_t errlen)
{
    const struct cfg *c = k->cfg;
    char kerr[512];
    rd_kafka_conf_t *conf = kconf_new(c, &c->kafka.consumer_properties, k->conf.defaults, err, errlen);
    if (!conf)
        return -1;
    if (kconf_set(conf, "group.id", k->conf.group, err, errlen) != 0 ||
        kconf_set(conf, "partition.assignment.strategy", KP_ASSIGNOR, err, errlen) != 0 ||
        kconf_set(conf, "enable.auto.offset.store", "false", err, errlen) != 0 ||
        (c->consumer.instance_id[0] &&
         kconf_set(conf, "group.instance.id", c->consumer.instance_id, err, errlen) != 0)) {
        rd_kafka_conf_destroy(conf);
        return -1;
    }
    rd_kafka_conf_set_opaque(conf, k);
    rd_kafka_conf_set_error_cb(conf, error_cb);
    if (k->conf.brokers)
        rd_kafka_conf_set_stats_cb(conf, stats_cb);
    rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
    if (!(k->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, kerr, sizeof(kerr)))) {
        rd_kafka_conf_destroy(conf);
        snprintf(err, errlen, "%skafka consumer: %s", k->conf.who, kerr);
        return -1;
    }
    kconf_track(k->rk);
    rd_kafka_poll_set_consumer(k->rk);
    return 0;
}

int kl_open(const struct cfg *c, const struct kl_conf *conf, struct kloop **out, char *err, size_t errlen)
{
    struct kloop *k = calloc(1, sizeof(*k));
    if (!k) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    k->cfg = c;
    k->conf = *conf;
    if (q_init(&k->done) != 0 || off_open(&k->off) != 0) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    k->done_init = true;
    if (strcmp(conf->topic, c->kafka.dlq_topic) == 0) {
        /* every dead letter would come back as a new invalid message */
        snprintf(err, errlen, "kafka.dlq_topic must differ from %s", conf->topic);
        goto fail;
    }
    if (dlq_open(c, conf->topic, &k->done, &k->dlq, err, errlen) != 0 || consumer_new(k, err, errlen) != 0)
        goto fail;
    *out = k;
    return 0;
fail:
    kl_close(k);
    return -1;
}

int kl_subscribe(struct kloop *k, char *err, size_t errlen)
{
    rd_kafka_topic_partition_list_t *sub = rd_kafka_topic_partition_list_new(1);
    if (!sub) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    rd_kafka_topic_partition_list_add(sub, k->conf.topic, RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t e = rd_kafka_subscribe(k->rk, sub);
    rd_kafka_topic_partition_list_destroy(sub);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
        snprintf(err, errlen, "kafka subscribe %s: %s", k->conf.topic, rd_kafka_err2str(e));
        return -1;
    }
    return 0;
}

void kl_close(struct kloop *k)
{
    if (!k)
        return;
    kp_close(k->rk, k->conf.who);
    if (k->dlq)
        dlq_close(k->dlq, k->conf.letters_close_ms);
    cmsg_free_list(k->retry);
    if (k->off)
        off_close(k->off);
    if (k->done_init)
        q_destroy(&k->done);
    free(k);
}

rd_kafka_t *kl_rk(const struct kloop *k)
{
    return k->rk;
}

struct queue *kl_done_queue(struct kloop *k)
{
    return &k->done;
}

struct dlq *kl_dlq(struct kloop *k)
{
    return k->dlq;
}

/* --- fetching ----------------------------------------------------------------- */

/* An error fetched in place of a message: a fatal one stops the owner (with
 * the main queue forwarded to the consumer, a fatal error comes here and not
 * to the error callback: a static member fenced by its own rejoin, for one);
 * the end of a partition is no error; the rest is said once while it lasts. */
static void fetch_error(struct kloop *k, const rd_kafka_message_t *km)
{
    if (km->err == RD_KAFKA_RESP_ERR__PARTITION_EOF || kconf_fatal(k->rk, km->err, &k->fatal))
        return;
    log_repeat(&k->say_fetch, LOG_LVL_WARNING, rd_kafka_err2name(km->err),
               "%skafka: %s (logged once while it lasts)", k->conf.who, rd_kafka_message_errstr(km));
}

size_t kl_fetch(struct kloop *k, rd_kafka_queue_t *q, int wait_ms, size_t max)
{
    size_t n = 0;
    bool room = true;
    while (room && n < max) {
        int wait = n == 0 ? wait_ms : 0;
        rd_kafka_message_t *km = q ? rd_kafka_consume_queue(q, wait) : rd_kafka_consumer_poll(k->rk, wait);
        if (!km)
            break;
        n++;
        if (km->err) {
            fetch_error(k, km);
        } else {
            log_repeat_end(&k->say_fetch, "a message fetched");
            room = k->conf.hooks.take(k->conf.hooks.arg, km);
        }
        rd_kafka_message_destroy(km);
    }
    return n;
}

/* --- pause ---------------------------------------------------------------------- */

void kl_pause(struct kloop *k, bool pause, const char *why)
{
    if (pause == k->paused || k->stopping)
        return;
    rd_kafka_resp_err_t e = kp_pause(k->rk, pause);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
        char key[64];
        snprintf(key, sizeof(key), "%skafka: %s partitions", k->conf.who, pause ? "pause" : "resume");
        log_repeat(&k->say_pause, LOG_LVL_WARNING, key, "%s: %s (logged once while it lasts)", key,
                   rd_kafka_err2str(e));
        return;
    }
    log_repeat_end(&k->say_pause, pause ? "paused" : "resumed");
    k->paused = pause;
    if (k->conf.paused)
        atomic_store(k->conf.paused, pause);
    if (pause)
        log_notice("%sfetching paused: %s", k->conf.who, why);
    else
        log_notice("%sfetching resumed", k->conf.who);
}

void kl_stop_fetching(struct kloop *k)
{
    kl_pause(k, true, "stopping");
    k->stopping = true;
}

bool kl_paused(const struct kloop *k)
{
    return k->paused;
}

/* --- offsets -------------------------------------------------------------------- */

int kl_track(struct kloop *k, int32_t partition, int64_t offset, uint32_t *epoch)
{
    return off_track(k->off, partition, offset, epoch);
}

int kl_done(struct kloop *k, int32_t partition, uint32_t epoch, int64_t offset)
{
    return off_done(k->off, partition, epoch, offset);
}

size_t kl_pending(const struct kloop *k)
{
    return off_pending(k->off);
}

size_t kl_inflight(const struct kloop *k, int32_t partition)
{
    return off_inflight(k->off, partition);
}

void kl_store(struct kloop *k)
{
    kp_store(k->rk, k->off, k->conf.topic, k->conf.who);
}

void kl_commit(struct kloop *k)
{
    if (kp_commit(k->rk, k->off, k->conf.topic, k->conf.who) == RD_KAFKA_RESP_ERR_NO_ERROR && k->conf.commits)
        atomic_fetch_add(k->conf.commits, 1);
}

/* --- dead letters ----------------------------------------------------------------- */

void kl_letter(struct kloop *k, struct cmsg *m)
{
    if (dlq_send(k->dlq, m) != 0) {
        m->next = k->retry;
        k->retry = m;
    }
}

void kl_serve(struct kloop *k, int wait_ms)
{
    dlq_poll(k->dlq, wait_ms);
    if (k->retry)
        k->retry = dlq_send_list(k->dlq, k->retry);
}

void kl_drain(struct kloop *k)
{
    bool moved = false;
    for (struct cmsg *m = q_take_all(&k->done), *n; m; m = n) {
        n = m->next;
        if (m->outcome == CMSG_DEAD_LETTER)
            atomic_fetch_add(k->conf.letters, 1);
        moved |= off_done(k->off, m->partition, m->epoch, m->offset) == 0;
        cmsg_free(m);
    }
    if (moved)
        kl_store(k);
}

bool kl_letters_out(const struct kloop *k)
{
    return k->retry != NULL || dlq_outstanding(k->dlq) > 0;
}

bool kl_fatal(const struct kloop *k)
{
    return k && (atomic_load(&k->fatal) != 0 || (k->dlq && dlq_fatal(k->dlq)));
}
