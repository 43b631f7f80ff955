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

#include "admtoken.h"
#include "cfg.h"
#include "orderid.h"
#include "publish.h"

/* Every outcome of a buy request, declared once. UNAVAILABLE is a definite
 * refusal: no unit is held (never reserved, or given back). UNKNOWN is an
 * outcome not known yet: the unit is reserved and kept (Kafka may hold the
 * order, or the replicas may not hold the reservation, or Redis went away
 * after the script was sent), and the sweeper publishes what Redis still
 * holds, so it becomes an order or, where Redis never held it, nothing; the
 * buyer gets the order id to ask (docs/api.md).
 * X(name, code seckill_reserve returns, HTTP status, JSON status, metric).
 * RSV_NO_CODE marks outcomes the script never returns. A code the table does
 * not know is logged and answered 503, never guessed. */
#define RSV_NO_CODE 0
/* What seckill_reserve answers a buy sent to the item's own slot once the
 * item sells from buckets: no outcome, the buy is sent again to its bucket. */
#define RSV_CODE_BUCKETED (-11)
#define RSV_OUTCOMES(X)                                                      \
    X(ACCEPTED, 1, 202, "accepted", req_accepted)         /* reserved, Kafka acknowledged */ \
    X(UNKNOWN_ITEM, -3, 404, "unknown_item", req_unknown_item) /* no stock loaded */    \
    X(NOT_STARTED, -4, 403, "not_started", req_not_started) /* before the window */     \
    X(DUPLICATE, -2, 409, "duplicate", req_duplicate)     /* the user holds a unit */  \
    X(ENDED, -5, 410, "ended", req_ended)                 /* after the window */       \
    X(SOLD_OUT, -1, 410, "sold_out", req_sold_out)                                     \
    X(PAUSED, -10, 503, "paused", req_paused) /* seckillctl item pause: come back later */ \
    /* The waiting room's refusals (issue #58): 403 admission_refused, with   \
     * the reason (admission_reason). */                                      \
    X(ADMISSION_REQUIRED, -6, 403, "admission_refused", req_admission_refused) /* no token */ \
    X(ADMISSION_USED, -7, 403, "admission_refused", req_admission_refused)                   \
    X(ADMISSION_LAPSED, -8, 403, "admission_refused", req_admission_refused)                 \
    X(ADMISSION_OTHER_SALE, -9, 403, "admission_refused", req_admission_refused)             \
    X(ADMISSION_INVALID, RSV_NO_CODE, 403, "admission_refused", req_admission_refused) /* checked here */ \
    X(UNAVAILABLE, RSV_NO_CODE, 503, "unavailable", req_unavailable) /* nothing kept: try again */     \
    X(UNKNOWN, RSV_NO_CODE, 503, "unknown", req_unknown) /* reserved, may become an order: kept */

enum rsv_outcome {
#define RSV_ENUM(name, code, http, json, metric) RSV_##name,
    RSV_OUTCOMES(RSV_ENUM)
#undef RSV_ENUM
};

/* Its HTTP status and JSON status word. */
unsigned rsv_http_status(enum rsv_outcome o);
const char *rsv_json_status(enum rsv_outcome o);
/* Count it in the producer's metrics. */
void rsv_count(enum rsv_outcome o);
/* An admission refusal's reason (admtoken.h): the one the table's code
 * means, or adm for ADMISSION_INVALID (the producer's own check); ADM_OK
 * for an outcome that is no admission refusal. */
enum adm_reason rsv_admission_reason(enum rsv_outcome o, enum adm_reason adm);

struct rsv_req {
    struct pub_ticket ticket; /* Kafka's delivery report comes back through it */
    struct rsv_req *next;     /* queue link, owned by whoever holds the request */
    /* in */
    int64_t user_id;
    int64_t item_id;
    /* A queued item's buy: the admission token the producer checked
     * (admtoken.h); Redis spends it with the reservation
     * (seckill_reserve_admitted). */
    int admitted;
    struct adm_token adm;
    /* Called on the reserving thread once outcome is final; after it the
     * request belongs to the caller again. */
    void (*complete)(struct rsv_req *r);
    /* out */
    enum rsv_outcome outcome;
    int64_t order_id;
    int64_t starts_at_ms; /* RSV_NOT_STARTED: when the sale opens */
    enum adm_reason adm_refused; /* RSV_ADMISSION_INVALID: why */
    /* private */
    struct rsv *owner;
    int64_t reserved_at_ms;
    int salt;  /* the slot the reservation is in (bucket.h; BUCKET_HOME: the item's own) */
    int tries; /* reservation calls sent for it (a dry bucket refilled is tried again) */
    int dr_err;
    int dr_status;
};

struct rsv;

/* Connect to Redis, check its functions (rfunc.h) and start the thread.
 * gen must hold a block. 0; -1 with err set; RFUNC_MISSING (rfunc.h) with
 * err set when Redis lacks the producer's function library or holds an older
 * one (no use waiting: an operator must load it). */
int rsv_start(const struct cfg *c, struct pub *p, struct oid_gen *gen, struct rsv **out,
              char *err, size_t errlen);
/* Queue a request (any thread). Its complete() is called exactly once. */
void rsv_submit(struct rsv *r, struct rsv_req *req);
/* Stop the thread once every submitted request has completed. */
void rsv_stop(struct rsv *r);

#endif
