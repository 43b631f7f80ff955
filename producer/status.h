/* status: what became of a buyer's order, for the calls a shop's page polls.
 *
 *   GET /api/v1/orders/{order_id}   one order, by its id
 *   GET /api/v1/seckill/{item_id}   the caller's own order for an item
 *
 * Every answer comes from Redis alone, never from PostgreSQL: winners poll
 * every second or so through the sale while the database is busy writing
 * their orders. The item's orders hash holds each order's state (the
 * reservation script writes it queued, the consumer settles it confirmed or
 * refused, a give-back removes it) and each buyer's order id; the order
 * index (orderidx.h) leads from an order id to its item.
 *
 * Requests queue up from the HTTP thread; one thread answers all that are
 * queued in two pipelined round trips on a Redis connection of its own, so a
 * burst of polls never delays a reservation (redis's way: a FIFO per worker,
 * completions handed back through a callback). */
#ifndef SECKILL_STATUS_H
#define SECKILL_STATUS_H

#include <stddef.h>
#include <stdint.h>

#include "cfg.h"
#include "ostate.h"

enum st_kind {
    ST_BY_ORDER, /* id is an order id */
    ST_BY_ITEM,  /* id is an item id: the caller's order for it */
};

enum st_state {
    ST_NONE, /* by item: the caller holds no order for it */
    /* The order's own states, in the table's order (common/sale/ostate.h):
     * ST_QUEUED (reserved, not yet in the database), ST_CONFIRMED, ST_REFUSED
     * (reason says why), and after the sale (issue #44), for an item with a
     * payment window, ST_PENDING_PAYMENT (to be paid by pay_by_ms), ST_PAID,
     * ST_EXPIRED, ST_CANCELLED (changed_at_ms says when). st_of_order()
     * leads from one to the other. */
#define ST_ORDER_STATE(name, letter, pg, json, unit, final, writer, detail) ST_##name,
    OST_STATES(ST_ORDER_STATE)
#undef ST_ORDER_STATE
    ST_NOT_FOUND,   /* by order: no such order, or not the caller's */
    ST_UNAVAILABLE, /* Redis could not answer */
};

struct st_req {
    struct st_req *next; /* queue link */
    /* in */
    enum st_kind kind;
    int64_t id;
    int64_t user_id; /* the caller; 0 only by order with producer.auth = "none" */
    /* By order: read too whether the order's item has a payment window
     * (its window hash's KEYS_WINDOW_PAY, keys.h), in the same round trip as
     * its state (the same slot): the cancel call's question (cancel.h). */
    int want_pay_window;
    /* Called on the status thread once state is final; after it the request
     * belongs to the caller again. */
    void (*complete)(struct st_req *q);
    /* out */
    enum st_state state;
    int64_t order_id, item_id, reserved_at_ms, settled_at_ms;
    int64_t pay_by_ms;     /* ST_PENDING_PAYMENT: the end of the payment window */
    int64_t changed_at_ms; /* ST_PAID, ST_EXPIRED, ST_CANCELLED: when */
    int item_pays;         /* want_pay_window: the item has a payment window */
    char reason[OST_FIELD_MAX];
};

struct st;

/* Connect to Redis and start the thread. 0, or -1 with err set. */
int st_start(const struct cfg *c, struct st **out, char *err, size_t errlen);
/* Queue a request (any thread). Its complete() is called exactly once. */
void st_submit(struct st *s, struct st_req *q);
/* Stop the thread once every submitted request has completed. */
void st_stop(struct st *s);

/* The JSON word of a state ("queued", "pending_payment" ...). */
const char *st_state_name(enum st_state s);
/* The answer for an order in state o (one of the table's). */
enum st_state st_of_order(enum ost_state o);
/* The order's state an answer stands for, or OST_NONE (ST_NONE,
 * ST_NOT_FOUND, ST_UNAVAILABLE). */
enum ost_state st_order(enum st_state s);


#endif
