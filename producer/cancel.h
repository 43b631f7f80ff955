/* cancel: a buyer's cancel of an order not yet paid (issue #44, item 3).
 *
 *   POST /api/v1/orders/{order_id}/cancel
 *
 * The order is found as the status call finds it (status.h, by order id
 * with the caller's user id), so another buyer's order answers exactly like
 * one that does not exist. Only an order that is not settled for good can
 * be cancelled: one still queued, or one waiting for its payment. Such a
 * cancel is published on the orders topic as the order message with
 * "type":"cancel" (order.h), the order's own ids, signed (ordersig.h),
 * keyed by the user as the user's orders are, so it reaches the consumer
 * after the order it cancels. It goes through the producer's one Kafka
 * producer (publish.h), and the request completes with the broker's
 * delivery report: a 202 promises that the cancel is on the topic, as a
 * buy's 202 promises the order is. It promises no more: the consumer
 * decides, under the user's lock, and PostgreSQL is the only authority (a
 * payment that got there first wins; the status calls then say "paid").
 *
 * So is an order persisted ("confirmed") of an item with a payment window
 * (the lookup reads the item's window hash too, keys.h KEYS_WINDOW_PAY):
 * the consumer marks it pending payment right after it settles it, and
 * between the two (a failover, a split) it is not known final.
 *
 * Every other state is answered from the status lookup alone and publishes
 * nothing: already cancelled answers 202 again (a buyer pressing twice, or
 * a retry after a lost answer), paid, expired, refused or final (an order
 * persisted of an item without a payment window) answer 409. A publish that fails is
 * never sent again by the producer: the buyer hears 503 and may ask again
 * (a second cancel of one order changes nothing at the consumer).
 *
 * No thread of its own: the lookup runs on the status thread, whose
 * completion signs and queues the message (librdkafka's queue, which never
 * waits: a full queue is refused at once); the delivery report, on
 * librdkafka's poll thread, completes the request. Each request's
 * complete() runs exactly once, on one of those two threads. */
#ifndef SECKILL_CANCEL_H
#define SECKILL_CANCEL_H

#include <stddef.h>
#include <stdint.h>

#include "cfg.h"
#include "publish.h"
#include "status.h"

/* Every answer of a cancel, declared once.
 * X(name, HTTP status, JSON status, metric). */
#define CX_OUTCOMES(X)                                                                          \
    X(CANCELLING, 202, "cancelling", cancel_accepted)     /* published, Kafka acknowledged */   \
    X(CANCELLED, 202, "cancelled", cancel_again)          /* cancelled before: nothing sent */  \
    X(PAID, 409, "paid", cancel_refused_paid)                                                   \
    X(EXPIRED, 409, "expired", cancel_refused_expired)                                          \
    X(REFUSED, 409, "refused", cancel_refused_refused)    /* never was an order */              \
    X(FINAL, 409, "final", cancel_refused_final)          /* no payment window: final */        \
    X(NOT_FOUND, 404, "not_found", cancel_refused_not_found) /* or another buyer's */           \
    X(UNAVAILABLE, 503, "unavailable", cancel_refused_unavailable) /* nothing published */      \
    X(UNKNOWN, 503, "unknown", cancel_refused_unknown)    /* Kafka may hold the cancel */

enum cx_outcome {
#define CX_ENUM(name, http, json, metric) CX_##name,
    CX_OUTCOMES(CX_ENUM)
#undef CX_ENUM
};

/* Its HTTP status and JSON status word. */
unsigned cx_http_status(enum cx_outcome o);
const char *cx_json_status(enum cx_outcome o);

struct cx_req {
    struct st_req sr;         /* the lookup; its out fields describe the order */
    struct pub_ticket ticket; /* Kafka's delivery report comes back through it */
    /* in */
    int64_t order_id;
    int64_t user_id; /* the caller (never 0: the owner is checked) */
    /* Called once the outcome is final, on the status thread or on
     * librdkafka's poll thread: it must only hand the request over (a
     * queue, a signal), never block. After it the request belongs to the
     * caller again. */
    void (*complete)(struct cx_req *q);
    /* out */
    enum cx_outcome outcome;
    /* private */
    struct cx *owner;
};

struct cx;

/* The canceller over the status thread st and the Kafka producer p, both
 * the caller's, to outlive it. 0, or -1 with err set. */
int cx_new(struct st *st, struct pub *p, struct cx **out, char *err, size_t errlen);
/* Queue a cancel (any thread). Its complete() is called exactly once. */
void cx_submit(struct cx *x, struct cx_req *q);
/* Once no request is in flight. */
void cx_free(struct cx *x);

#endif
