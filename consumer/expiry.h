/* expiry: orders not paid in time expire, and their units go back on sale,
 * each exactly once (issue #44).
 *
 * A thread of the consumer's own, with its own PostgreSQL and Redis
 * connections, made and remade here with backoff (a service down is a state
 * to wait out, not a failure). A statement PostgreSQL refuses for what it
 * carries (pgtrip_class: not the connection, a deadlock or the like) is
 * said as an error, once while it lasts, and the pass retried with the
 * same backoff: an expiry has no message to set aside, the rows stay where
 * they are, nothing is lost, and an operator must look. Every
 * consumer.expire_interval_ms, and at once again after a full batch:
 *
 * 1. Expire: one statement (consumer/sql/cons_expire.sql), so one
 *    transaction, takes up to consumer.expire_batch windows that ended from
 *    order_deadlines, marks those orders still pending expired, gives their
 *    units back to items.stock_left and records a return per order in
 *    order_returns; the window of an order paid or cancelled meanwhile is
 *    only dropped, and counts towards a full batch. Any number of consumers
 *    run it side by side: each locks what it takes and skips what another
 *    holds, and the status is checked again as it changes, so each order
 *    expires once.
 * 2. Return: the orders this pass expired (the statement's own rows), then
 *    the returns Redis does not have yet whose next try is due (of an
 *    earlier pass, of another consumer or of one that crashed, expired or
 *    cancelled) go to seckill_return (consumer/lua/seckill_return.lua), one
 *    call per item in one pipelined round trip; Redis gives each order id's
 *    unit back once, so a retry, a replay or two consumers sending one
 *    return give it once. In the same round trip seckill_mark (rstate.h)
 *    writes each order's state (expired or cancelled, with the time of the
 *    change) into the item's orders hash, which the buyers' status calls
 *    read; it only moves a state forward, so sending it again changes
 *    nothing.
 *    A return whose two calls Redis took is marked done (so a crash between
 *    them sends both again); one that failed waits longer each
 *    time (from 100 ms, doubling, up to consumer.return_backoff_cap_ms) and
 *    stays in the table across restarts until it is done. A return this
 *    pass expired is not due for a retry before EXPIRY_FIRST_TRY_MS: the
 *    other consumers leave it to the one sending it, unless that one dies.
 * 3. Count: the gauge of returns not done, once per interval at most (a
 *    count of the pending index, not something to repeat per batch).
 *
 * So the delay between a pay_by and the unit back on sale is bounded by the
 * interval, the time to expire and return what is due before it, and the
 * producers' sold-out refresh (producer.soldout_refresh_ms).
 *
 * expiry_start and expiry_stop belong to the consumer's main thread. */
#ifndef SECKILL_EXPIRY_H
#define SECKILL_EXPIRY_H

#include <stddef.h>

#include "cfg.h"

/* How long after its order expired a return is due for a retry by any
 * consumer's retry pass, unless marked done by then. Longer than a pass
 * takes (a pass is tens of ms); short enough that a consumer killed between
 * the expiry and the return costs the unit a few seconds off sale. */
#define EXPIRY_FIRST_TRY_MS 3000

struct expiry;

/* Start the thread (it connects itself, on its first pass). c must outlive
 * expiry_stop. 0, or -1 with err (out of memory, no thread). */
int expiry_start(const struct cfg *c, struct expiry **out, char *err, size_t errlen);
/* Stop the thread, wait for it (a pass under way finishes; what it did not
 * return is returned by the next consumer to run) and free everything. NULL
 * is fine. */
void expiry_stop(struct expiry *e);

#endif
