/* deadline: the consumer's thread for an order's life after the sale:
 * orders not paid in time expire, and every unit given back (expired, or
 * cancelled by its buyer) goes back on sale, each exactly once (issue #44).
 *
 * One thread, with its own PostgreSQL connection (one session for the
 * deadline pass and the returns outbox, outbox.h) and the outbox's Redis
 * connection, made and remade with backoff (a service down is a state to
 * wait out, not a failure). A statement PostgreSQL refuses for what it
 * carries (pgtrip_class: not the connection, a deadlock or the like) is
 * said as an error, once while it lasts, and the pass retried with the same
 * backoff: a pass has no message to set aside, the rows stay where they
 * are, nothing is lost, and an operator must look. Every
 * consumer.expire_interval_ms, and at once again after a full batch:
 *
 * 1. The deadline pass: one statement (consumer/sql/cons_expire.sql), so
 *    one transaction, takes up to consumer.expire_batch windows that ended
 *    from order_deadlines, marks those orders still pending expired, and
 *    gives their units back (units_back, migration 016: items.stock_left
 *    and a return per order in order_returns); the window of an order paid
 *    or cancelled meanwhile is only dropped, and counts towards a full
 *    batch. Any number of consumers run it side by side: each locks what it
 *    takes and skips what another holds, and the status is checked again as
 *    it changes, so each order expires once.
 * 2. The outbox: the returns this pass wrote (the statement's own rows) go
 *    to Redis at once (ob_send); a return this pass wrote is not due for
 *    another consumer's retry before DL_FIRST_TRY_MS: the others leave
 *    it to the one sending it, unless that one dies. Then the returns due
 *    for a retry (ob_retry: of an earlier pass, of another consumer or of
 *    one that crashed; expired or cancelled), and the gauge of returns not
 *    done (ob_count).
 *
 * So the delay between a pay_by and the unit back on sale is bounded by the
 * interval, the time to expire and return what is due before it, and the
 * producers' sold-out refresh (producer.soldout_refresh_ms). The thread's
 * log lines start "expiry: ".
 *
 * dl_start and dl_stop belong to the consumer's main thread. */
#ifndef SECKILL_DEADLINE_H
#define SECKILL_DEADLINE_H

#include <stddef.h>

#include "cfg.h"

/* How long after its order expired a return is due for a retry by any
 * consumer's retry pass, unless marked done by then. Longer than a pass
 * takes (a pass is tens of ms); short enough that a consumer killed between
 * the expiry and the return costs the unit a few seconds off sale. */
#define DL_FIRST_TRY_MS 3000

struct deadline;

/* Start the thread (it connects itself, on its first pass). c must outlive
 * dl_stop. 0, or -1 with err (out of memory, no thread). */
int dl_start(const struct cfg *c, struct deadline **out, char *err, size_t errlen);
/* Stop the thread, wait for it (a pass under way finishes; what it did not
 * return is returned by the next consumer to run) and free everything. NULL
 * is fine. */
void dl_stop(struct deadline *d);

#endif
