#include "dlq.h"

#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kconf.h"
#include "log.h"

struct dlq {
    const struct cfg *cfg;
    const char *topic; /* the source topic */
    rd_kafka_t *rk;
    struct queue *done;
    _Atomic int outstanding;
    int failing; /* poll thread only: for logging state changes */
    _Atomic int fatal;
    int closing; /* purged letters are dropped, not sent again */
};

static int produce(struct dlq *d, struct cmsg *m)
{
    char part[16], off[24];
    snprintf(part, sizeof(part), "%" PRId32, m->partition);
    snprintf(off, sizeof(off), "%" PRId64, m->offset);
    const char *why = m->error ? m->error : "invalid";
    rd_kafka_resp_err_t e = rd_kafka_producev(
        d->rk, RD_KAFKA_V_TOPIC(d->cfg->kafka.dlq_topic), RD_KAFKA_V_VALUE(m->payload, m->payload_len),
        RD_KAFKA_V_KEY(m->key, m->key_len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_HEADER("error", why, (ssize_t)strlen(why)),
        RD_KAFKA_V_HEADER("source_topic", d->topic, (ssize_t)strlen(d->topic)),
        RD_KAFKA_V_HEADER("source_partition", part, (ssize_t)strlen(part)),
        RD_KAFKA_V_HEADER("source_offset", off, (ssize_t)strlen(off)), RD_KAFKA_V_OPAQUE(m), RD_KAFKA_V_END);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
        log_warn("dead letter for %s[%" PRId32 "]@%" PRId64 " not queued: %s", d->topic,
                 m->partition, m->offset, rd_kafka_err2str(e));
        return -1;
    }
    return 0;
}

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *km, void *opaque)
{
    struct dlq *d = opaque;
    struct cmsg *m = km->_private;
    (void)rk;
    if (km->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        if (d->failing) {
            log_notice("dead-letter topic %s writable again", d->cfg->kafka.dlq_topic);
            d->failing = 0;
        }
        atomic_fetch_sub(&d->outstanding, 1);
        m->outcome = CMSG_DEAD_LETTER;
        q_push(d->done, m);
        return;
    }
    if (d->closing) {
        atomic_fetch_sub(&d->outstanding, 1);
        cmsg_free(m);
        return;
    }
    if (!d->failing) {
        log_error("dead letter for %s[%" PRId32 "]@%" PRId64 " failed: %s; sending it again",
                  d->topic, m->partition, m->offset, rd_kafka_err2str(km->err));
        d->failing = 1;
    }
    /* The offset must not move without the letter: send it again. If even
     * queueing fails the message stays outstanding and holds its partition's
     * watermark, which is the safe way to be stuck. */
    if (produce(d, m) != 0) {
        atomic_fetch_sub(&d->outstanding, 1);
        cmsg_free(m);
    }
}

/* The broker and the password are the consumer's own, whose error callback
 * reports a refusal or an outage once per state change; failed letters are
 * reported by dr_cb. So this producer's connection errors are for debugging
 * (left to librdkafka, it logged each one at error level), except a fatal
 * one. */
static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    struct dlq *d = opaque;
    if (kconf_fatal(rk, err, &d->fatal))
        return;
    log_debug("kafka (dead letters): %s: %s", rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

bool dlq_fatal(const struct dlq *d)
{
    return atomic_load(&d->fatal) != 0;
}

int dlq_open(const struct cfg *c, const char *source_topic, struct queue *done, struct dlq **out, char *err,
             size_t errlen)
{
    static const char *const defaults[] = { "linger.ms", "5", NULL };
    char kerr[512];
    struct dlq *d = calloc(1, sizeof(*d));
    rd_kafka_conf_t *conf = NULL;
    if (!d) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    d->cfg = c;
    d->topic = source_topic;
    d->done = done;
    if (!(conf = kconf_new(c, &c->kafka.producer_properties, defaults, err, errlen)))
        goto fail;
    if (kconf_set(conf, "enable.idempotence", "true", err, errlen) != 0)
        goto fail;
    rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
    rd_kafka_conf_set_error_cb(conf, error_cb);
    rd_kafka_conf_set_opaque(conf, d);
    if (!(d->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, kerr, sizeof(kerr)))) {
        snprintf(err, errlen, "dead-letter producer: %s", kerr);
        goto fail;
    }
    kconf_track(d->rk);
    *out = d;
    return 0;
fail:
    if (conf && !d->rk)
        rd_kafka_conf_destroy(conf);
    free(d);
    return -1;
}

int dlq_send(struct dlq *d, struct cmsg *m)
{
    atomic_fetch_add(&d->outstanding, 1);
    if (produce(d, m) != 0) {
        atomic_fetch_sub(&d->outstanding, 1);
        return -1;
    }
    return 0;
}

struct cmsg *dlq_send_list(struct dlq *d, struct cmsg *list)
{
    struct cmsg *keep = NULL;
    while (list) {
        struct cmsg *n = list->next;
        if (dlq_send(d, list) != 0) {
            list->next = keep;
            keep = list;
        }
        list = n;
    }
    return keep;
}

void dlq_poll(struct dlq *d, int timeout_ms)
{
    rd_kafka_poll(d->rk, timeout_ms);
}

int dlq_outstanding(const struct dlq *d)
{
    return atomic_load(&d->outstanding);
}

void dlq_close(struct dlq *d, int timeout_ms)
{
    if (!d)
        return;
    if (rd_kafka_flush(d->rk, timeout_ms) != RD_KAFKA_RESP_ERR_NO_ERROR)
        log_warn("dead-letter producer: %d letters unacknowledged at stop", dlq_outstanding(d));
    /* Whatever is left is purged; the delivery reports free the messages and
     * their offsets were never stored, so they come back after a restart. */
    d->closing = 1;
    rd_kafka_purge(d->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    rd_kafka_poll(d->rk, 0);
    kconf_untrack(d->rk);
    rd_kafka_destroy(d->rk);
    free(d);
}
