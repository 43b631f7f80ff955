#include "publish.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bgthread.h"
#include "daemon.h"
#include "kconf.h"
#include "log.h"

struct pub {
    rd_kafka_t *rk;
    rd_kafka_topic_t *topic;
    struct bgthread poller;
    _Atomic int fatal;
    _Atomic int refused; /* the last refusal logged, 0 once a ping succeeds */
    int timeout_ms;
};

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    struct pub_ticket *t = m->_private;
    (void)rk;
    (void)opaque;
    if (t)
        t->done(t, m->err, rd_kafka_message_status(m));
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    struct pub *p = opaque;
    if (kconf_fatal(rk, err, &p->fatal))
        return;
    /* Transient: librdkafka retries by itself, and the delivery reports and
     * the health check (which logs once per state change) carry the
     * consequences; only "all brokers down", itself a state change, is worth
     * a line at the default level. */
    if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
        log_warn("kafka: %s", reason);
    /* A broker refused us (SASL, TLS): the reason, once until we are up
     * again (pub_ping). */
    else if (kconf_refused(err, reason) && atomic_exchange(&p->refused, err) != err)
        log_error("kafka: %s: %s", rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
    else
        log_debug("kafka: %s: %s", rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

/* The poll thread's wait for delivery reports: also how long pub_close
 * waits for it to notice the stop. */
#define POLL_MS 100
/* After a purge the reports are local and immediate; a second is slack. */
#define PURGED_FLUSH_MS 1000

static void *poll_main(void *arg)
{
    struct pub *p = arg;
    daemon_signals_block_thread();
    while (!bgt_stopping(&p->poller))
        rd_kafka_poll(p->rk, POLL_MS);
    return NULL;
}

int pub_open(const struct cfg *c, struct pub **out, char *err, size_t errlen)
{
    struct pub *p = calloc(1, sizeof(*p));
    rd_kafka_conf_t *conf = NULL;
    char e[512], tmo[16];
    size_t tlen = sizeof(tmo);
    const char *defaults[] = { "message.timeout.ms", tmo, "linger.ms", "5", NULL };
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    snprintf(tmo, sizeof(tmo), "%d", PUB_DEFAULT_TIMEOUT_MS);
    /* Defaults first, so the operator's properties override them; the
     * idempotence setting last, so nothing turns it off. */
    if (!(conf = kconf_new(c, &c->kafka.producer_properties, defaults, err, errlen)) ||
        kconf_set(conf, "enable.idempotence", "true", err, errlen) != 0)
        goto fail;
    if (rd_kafka_conf_get(conf, "message.timeout.ms", tmo, &tlen) == RD_KAFKA_CONF_OK)
        p->timeout_ms = atoi(tmo);
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_conf_set_error_cb(conf, on_error);
    rd_kafka_conf_set_opaque(conf, p);
    p->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, e, sizeof(e));
    if (!p->rk) {
        snprintf(err, errlen, "kafka producer: %s", e);
        goto fail;
    }
    conf = NULL; /* owned by rk now */
    kconf_track(p->rk);
    p->topic = rd_kafka_topic_new(p->rk, c->kafka.topic, NULL);
    if (!p->topic) {
        snprintf(err, errlen, "kafka topic %s: %s", c->kafka.topic,
                 rd_kafka_err2str(rd_kafka_last_error()));
        goto fail;
    }
    if (bgt_start(&p->poller, poll_main, p) != 0) {
        snprintf(err, errlen, "cannot start the kafka poll thread");
        goto fail;
    }
    *out = p;
    return 0;
fail:
    if (conf)
        rd_kafka_conf_destroy(conf);
    if (p->topic)
        rd_kafka_topic_destroy(p->topic);
    if (p->rk) {
        kconf_untrack(p->rk);
        rd_kafka_destroy(p->rk);
    }
    free(p);
    return -1;
}

void pub_close(struct pub *p, int timeout_ms)
{
    if (!p)
        return;
    /* kcat's order: flush, purge the rest so every ticket hears its fate,
     * serve those reports, then destroy. */
    if (rd_kafka_flush(p->rk, timeout_ms) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        log_warn("kafka: %d messages unsent after %d ms; purging", rd_kafka_outq_len(p->rk),
                 timeout_ms);
        rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        rd_kafka_flush(p->rk, PURGED_FLUSH_MS);
    }
    bgt_stop(&p->poller);
    rd_kafka_poll(p->rk, 0);
    rd_kafka_topic_destroy(p->topic);
    kconf_untrack(p->rk);
    rd_kafka_destroy(p->rk);
    free(p);
}

rd_kafka_resp_err_t pub_send(struct pub *p, int64_t user_id, const char *msg, size_t len,
                             struct pub_ticket *t)
{
    char key[24];
    int klen = snprintf(key, sizeof(key), "%" PRId64, user_id);
    /* Key = user id: one user's orders land in one partition, in order, so
     * one consumer serializes them. Copy: the caller's buffer is reused. */
    if (rd_kafka_produce(p->topic, RD_KAFKA_PARTITION_UA, RD_KAFKA_MSG_F_COPY, (void *)msg, len,
                         key, (size_t)klen, t) != 0)
        return rd_kafka_last_error();
    return RD_KAFKA_RESP_ERR_NO_ERROR;
}

void pub_purge(struct pub *p, int inflight)
{
    rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE | (inflight ? RD_KAFKA_PURGE_F_INFLIGHT : 0));
}

int pub_ping(struct pub *p, int timeout_ms)
{
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(p->rk, 0, p->topic, &md, timeout_ms);
    int ok = e == RD_KAFKA_RESP_ERR_NO_ERROR && md->topic_cnt == 1 && md->topics[0].err == 0;
    if (md)
        rd_kafka_metadata_destroy(md);
    if (ok)
        atomic_store(&p->refused, 0);
    return ok;
}

int pub_fatal(struct pub *p) { return atomic_load(&p->fatal); }
int pub_timeout_ms(const struct pub *p) { return p->timeout_ms; }
