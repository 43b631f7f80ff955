/* ingress: the HTTP API (libmicrohttpd, one epoll thread).
 *
 *   POST /api/v1/seckill            {"item_id":I[,"user_id":U]}
 *                                   -> 202/409/410/404/403/401/400/503/429
 *   GET  /api/v1/orders/{order_id}  an order's status (status.h)
 *   GET  /api/v1/seckill/{item_id}  the caller's order for an item
 *   POST /api/v1/orders/{order_id}/cancel
 *                                   the caller cancels an unpaid order
 *                                   (cancel.h) -> 202/409/404/401/400/503/429
 *   POST /api/v1/queue/{item_id}    join an item's waiting room (wroom.h)
 *   GET  /api/v1/queue/{item_id}    ask where one stands in it
 *   GET  /healthz                   Redis and Kafka reachable
 *   (HEAD wherever GET is; /metrics is on the operators' listener, ops.h)
 *
 * With producer.auth = "jwt" the buyer is the bearer token's (auth.h),
 * checked on the HTTP thread from the headers alone. A buy request for an
 * item known sold out (soldout.h) is answered 410 there too. Any other is parsed
 * on the HTTP thread, then its connection is suspended while the reserving
 * thread works on it (a status call: the status thread; a cancel: the
 * status thread, then Kafka's acknowledgement), and resumed with the
 * answer: the HTTP thread never waits for Redis or Kafka. A cancel names
 * its caller always: the token's buyer, or with producer.auth = "none" a
 * ?user_id=U (never anyone, as a read by order id may be). A known path
 * with a method it does not take answers 405 with Allow.
 *
 * Before any of that, the front door (ratelimit.h): connections beyond
 * producer.max_connections_per_address are closed as they are accepted; an
 * API call over its client address's rate, or, once its token is verified,
 * its buyer's, is answered 429 rate_limited with Retry-After. /healthz is
 * not limited. A buy from a buyer known to hold a unit of the item
 * (winners.h) is answered 409 on the HTTP thread. A buy that carries an
 * admission (the Seckill-Admission header, admtoken.h) has it checked on the
 * HTTP thread too, before Redis, and refused 403 admission_refused with its
 * reason; one that passes is reserved by seckill_reserve_admitted, which
 * spends it. */
#ifndef SECKILL_INGRESS_H
#define SECKILL_INGRESS_H

#include <stddef.h>

#include "auth.h"
#include "cancel.h"
#include "cfg.h"
#include "reserve.h"
#include "soldout.h"
#include "status.h"
#include "winners.h"
#include "wroom.h"

struct ingress;

/* Readiness the health endpoint reports, set by housekeeping. */
struct ing_health {
    _Atomic int redis_ok;
    _Atomic int kafka_ok;
};

/* Listen on producer.listen:port. 0, or -1 with err set. */
int ing_start(const struct cfg *c, struct rsv *r, struct st *st, struct cx *x, struct so *so, struct win *w,
              struct wr *wr, struct auth *a, struct ing_health *h, struct ingress **out, char *err,
              size_t errlen);
/* The health of /healthz into b (JSON); its HTTP status: 200, or 503
 * while Redis or Kafka is down or the daemon is stopping. Any thread. */
struct mbuf;
int ing_health_render(struct ingress *g, struct mbuf *b);
/* From now on order requests are answered 503 and connections are closed
 * after their answer; requests already queued still finish. */
void ing_stop_accepting(struct ingress *g);
/* Requests between parsing and their answer. */
long ing_inflight(const struct ingress *g);
/* Close the listener and every connection; only once ing_inflight() is 0. */
void ing_stop(struct ingress *g);

#endif
