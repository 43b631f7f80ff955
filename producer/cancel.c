#include "cancel.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "log.h"
#include "order.h"
#include "ordersig.h"
#include "pmetrics.h"
#include "util.h"

struct cx {
    struct st *st;
    struct pub *pub;
    /* Status thread only (the one that signs and queues): said once while
     * it lasts, not once per cancel. */
    struct log_repeat say_unsigned;
};

static const struct {
    unsigned http;
    const char *json;
} outcomes[] = {
#define CX_ROW(name, http, json, metric) { http, json },
    CX_OUTCOMES(CX_ROW)
#undef CX_ROW
};

unsigned cx_http_status(enum cx_outcome o) { return outcomes[o].http; }
const char *cx_json_status(enum cx_outcome o) { return outcomes[o].json; }

static void cx_count(enum cx_outcome o)
{
    switch (o) {
#define CX_CASE(name, http, json, metric) \
    case CX_##name: PM_INC(metric); break;
        CX_OUTCOMES(CX_CASE)
#undef CX_CASE
    }
}

/* Counted here, before the hand-back: a client gone meanwhile is never
 * answered, and its cancel was still decided. */
static void finish(struct cx_req *q, enum cx_outcome o)
{
    q->outcome = o;
    cx_count(o);
    q->complete(q);
}

/* librdkafka's poll thread: the broker's answer decides the outcome. */
static void on_delivery(struct pub_ticket *t, rd_kafka_resp_err_t err, rd_kafka_msg_status_t status)
{
    struct cx_req *q = (struct cx_req *)((char *)t - offsetof(struct cx_req, ticket));
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        finish(q, CX_CANCELLING);
    } else if (status == RD_KAFKA_MSG_STATUS_NOT_PERSISTED) {
        PM_INC(cancel_publish_not_persisted);
        finish(q, CX_UNAVAILABLE);
    } else {
        /* Kafka may hold it. Not sent again: the buyer may ask again, and
         * the status calls say "cancelled" once the consumer applied it. */
        PM_INC(cancel_publish_possibly_persisted);
        log_debug("kafka: cancel of order %" PRId64 " possibly persisted (%s)", q->order_id,
                  rd_kafka_err2name(err));
        finish(q, CX_UNKNOWN);
    }
}

/* The cancel message of the order the lookup found, into buf: its length,
 * or -1 (no key to sign with). */
static int cancel_message(struct cx *x, const struct st_req *r, char *buf, size_t len)
{
    /* reserved_at_ms is the request's time: the order's own is the
     * consumer's to keep, and the MAC does not cover it (ordersig.h). */
    struct order o = { r->order_id, r->user_id, r->item_id, 1, util_wall_ms(), ORDER_CANCEL, "" };
    if (osig_sign(&o) != 0) {
        log_repeat(&x->say_unsigned, LOG_LVL_ERROR, "cancel: no order key to sign with",
                   "cancel: no order key to sign with; cancels are refused (503) until a reload "
                   "brings one");
        return -1;
    }
    log_repeat_end(&x->say_unsigned, "a cancel was signed");
    return order_encode(&o, buf, len);
}

/* Status thread: hand the cancel to Kafka. A message the local queue
 * refuses never left the process: nothing was published. */
static void publish(struct cx *x, struct cx_req *q)
{
    char msg[ORDER_MSG_MAX];
    int len = cancel_message(x, &q->sr, msg, sizeof(msg));
    rd_kafka_resp_err_t ke;
    if (len < 0) {
        finish(q, CX_UNAVAILABLE);
        return;
    }
    /* Keyed by the user, as pub_send keys the orders: the cancel lands in
     * the partition of the order it cancels, after it. */
    ke = pub_send(x->pub, q->sr.user_id, msg, (size_t)len, &q->ticket);
    if (ke == RD_KAFKA_RESP_ERR_NO_ERROR)
        return;
    if (ke == RD_KAFKA_RESP_ERR__QUEUE_FULL)
        PM_INC(cancel_publish_queue_full);
    else
        PM_INC(cancel_publish_not_persisted);
    finish(q, CX_UNAVAILABLE);
}

/* The answer to a cancel of an order in state o, final (ostate.h). */
static enum cx_outcome final_outcome(enum ost_state o)
{
    switch (o) {
    case OST_CANCELLED: return CX_CANCELLED;
    case OST_PAID: return CX_PAID;
    case OST_EXPIRED: return CX_EXPIRED;
    case OST_REFUSED: return CX_REFUSED;
    case OST_CONFIRMED: return CX_FINAL; /* persisted, of an item without a payment window */
    default:
        /* a final state this module does not know is never guessed to be
         * cancellable, nor answered as one it knows */
        return CX_UNAVAILABLE;
    }
}

/* Status thread: the order's state decides. A state not final is
 * published (a queued order, one pending payment, and one persisted of an
 * item with a payment window: the consumer marks it pending payment right
 * after it settles it, and a failover or a split between the two calls
 * leaves it settled alone, not known final): the consumer decides, under
 * the user's lock (PostgreSQL knows). */
static void on_found(struct st_req *sr)
{
    struct cx_req *q = (struct cx_req *)sr;
    enum ost_state o = st_order(sr->state);
    if (o == OST_NONE) {
        /* ST_NOT_FOUND; ST_UNAVAILABLE; ST_NONE is by item only */
        finish(q, sr->state == ST_NOT_FOUND ? CX_NOT_FOUND : CX_UNAVAILABLE);
        return;
    }
    if (!ost_final(o, sr->item_pays))
        publish(q->owner, q);
    else
        finish(q, final_outcome(o));
}

int cx_new(struct st *st, struct pub *p, struct cx **out, char *err, size_t errlen)
{
    struct cx *x = calloc(1, sizeof(*x));
    if (!x) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    x->st = st;
    x->pub = p;
    *out = x;
    return 0;
}

void cx_submit(struct cx *x, struct cx_req *q)
{
    q->owner = x;
    q->ticket.done = on_delivery;
    q->sr = (struct st_req){ .kind = ST_BY_ORDER, .id = q->order_id, .user_id = q->user_id,
                             .want_pay_window = 1, .complete = on_found };
    st_submit(x->st, &q->sr);
}

void cx_free(struct cx *x) { free(x); }
