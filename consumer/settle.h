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
 * failed stay behind. Beyond SETTLE_BACKLOG_MAX the oldest are given up, for
 * 'seckillctl reconcile --fix' to drop.
 *
 * A struct settle has its own Redis connection (an rpipe) and belongs to one
 * thread. */
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
void settle_close(struct settle *s);
/* Clear the reservations of the settled orders v[0..n) (read, not kept),
 * with the backlog of earlier ones that could not be cleared. */
void settle_clear(struct settle *s, struct cmsg *const *v, size_t n);
/* While idle: retry the backlog, at most once a second. A backlog left by a
 * Redis outage must not wait for the next order, which may never come once
 * the sale is over. */
void settle_idle(struct settle *s);
/* Reservations waiting in the backlog for another try (metrics, tests). */
size_t settle_backlog(const struct settle *s);

#endif
