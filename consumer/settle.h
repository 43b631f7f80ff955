/* settle: clear the reservations of settled orders from Redis.
 *
 * Once the consumer has settled an order (persisted, found already there, or
 * refused), its reservation must leave Redis (the item's pending and
 * unpublished sets) and what became of it must be recorded for the buyers'
 * status calls: seckill_settle, one call per item (each command in it takes
 * all the item's orders at once), all in one pipelined round trip (on a
 * Redis Cluster, one per primary that holds some of the items: rpipe.h
 * routes each call by its item's keys). Nothing else ever clears a
 * reservation Kafka acknowledged, so what fails (Redis restarting, one
 * shard of a Cluster down) stays in a backlog and goes with the next call;
 * what failed on a dropped connection is retried at once on a new one. Both
 * are safe because the script is safe to repeat; only the items whose call
 * failed stay behind.
 *
 * An order persisted pending payment (its message's pay_by_ms, from
 * sink_write) is also marked pending payment with its pay_by for the status
 * calls: one seckill_mark call per item that has such orders, built by the
 * consumer's writer of states (rstate.h), right after the item's
 * seckill_settle in the same round trip; an item without a payment window
 * costs nothing more. The item's orders leave the backlog only when both
 * calls answered.
 * A buyer's cancel has nothing to settle here (cmsg_status OST_NONE): it comes
 * back at once; its unit goes back to Redis from order_returns
 * (the returns outbox, consumer/outbox.c).
 *
 * A message comes back to its worker, to be reported done (its Kafka offset
 * stored), only once its reservation is cleared: a consumer killed while a
 * clear waits in the backlog has Kafka deliver the message again, and the
 * replay (the order found persisted) clears it (issue #32). Until then the
 * backlog holds the message itself, not a copy; its partition's offset waits
 * behind it, and consumer.max_pending bounds how many wait. Beyond
 * SETTLE_BACKLOG_MAX (partitions the limit does not cover) the oldest come
 * back uncleared, for 'seckillctl reconcile --fix' to drop.
 *
 * A struct settle has its own Redis connection (an rpipe) and belongs to one
 * thread. The messages it holds stay the caller's: settle never frees one. */
#ifndef SECKILL_SETTLE_H
#define SECKILL_SETTLE_H

#include <stddef.h>

#include "cfg.h"
#include "queue.h"

/* Reservations kept for a retry at most; the oldest go beyond it. */
#define SETTLE_BACKLOG_MAX 100000

struct settle;

/* Connect for worker `id` (named in the logs). 0, or -1 and err. */
int settle_open(const struct cfg *c, int id, struct settle **out, char *err, size_t errlen);
/* Messages still held are not freed: settle_abandon hands them back first. */
void settle_close(struct settle *s);
/* Clear the reservations of the settled orders v[0..n), with the backlog of
 * earlier ones that could not be cleared. Returns the messages whose
 * reservation is now cleared (of v and of earlier calls), linked through
 * next, to report; *nout says how many. The rest of v stays held. */
struct cmsg *settle_clear(struct settle *s, struct cmsg *const *v, size_t n, size_t *nout);
/* While idle: retry the backlog, at most once a second; returns what it
 * cleared, as settle_clear. A backlog left by a Redis outage must not wait
 * for the next order, which may never come once the sale is over. */
struct cmsg *settle_idle(struct settle *s, size_t *nout);
/* Empty the backlog and hand its messages back unreported (a worker that
 * stops: their offsets stay, and Kafka delivers them again). */
struct cmsg *settle_abandon(struct settle *s, size_t *nout);
/* Reservations waiting in the backlog for another try (metrics, tests). */
size_t settle_backlog(const struct settle *s);

#endif
