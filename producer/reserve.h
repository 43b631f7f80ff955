/* reserve: the order path between HTTP and Kafka, on one thread.
 *
 * Requests from the HTTP thread queue up here; each turn of the loop runs
 * every queued reservation script in ONE pipelined round trip to Redis, hands
 * the reserved orders to Kafka, and, as delivery reports come back from the
 * poll thread, marks them published (or gives the unit back) in one more
 * round trip. Only this thread touches its Redis connection and the order
 * id generator; the others only queue work and signal (redis's way). */
#ifndef SECKILL_RESERVE_H
#define SECKILL_RESERVE_H

#include <stdint.h>

#include "cfg.h"
#include "orderid.h"
#include "publish.h"

enum rsv_outcome {
    RSV_ACCEPTED,     /* reserved and acknowledged by Kafka */
    RSV_DUPLICATE,    /* the user already holds a unit of the item */
    RSV_SOLD_OUT,
    RSV_UNKNOWN_ITEM, /* no stock loaded */
    RSV_UNAVAILABLE,  /* Redis or Kafka could not take it */
};

struct rsv_req {
    struct pub_ticket ticket; /* Kafka's delivery report comes back through it */
    struct rsv_req *next;     /* queue link, owned by whoever holds the request */
    /* in */
    int64_t user_id;
    int64_t item_id;
    /* Called on the reserving thread once outcome is final; after it the
     * request belongs to the caller again. */
    void (*complete)(struct rsv_req *r);
    /* out */
    enum rsv_outcome outcome;
    int64_t order_id;
    /* private */
    struct rsv *owner;
    int64_t reserved_at_ms;
    int dr_err;
    int dr_status;
};

struct rsv;

/* Connect to Redis, load the scripts and start the thread. gen must hold a
 * block. 0, or -1 with err set. */
int rsv_start(const struct cfg *c, struct pub *p, struct oid_gen *gen, struct rsv **out,
              char *err, size_t errlen);
/* Queue a request (any thread). Its complete() is called exactly once. */
void rsv_submit(struct rsv *r, struct rsv_req *req);
/* Stop the thread once every submitted request has completed. */
void rsv_stop(struct rsv *r);

#endif
