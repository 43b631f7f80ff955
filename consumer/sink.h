/* sink: one PostgreSQL transaction per batch of orders (and buyers' cancels).
 *
 * In one transaction: advance each user's fence (a stale one refuses that
 * user's orders), read the stock of the batch's items, decide per order what
 * happens, insert what fits and take stock for it, record the refusals,
 * commit. The orders already there are looked up first only when the last
 * batch met one: otherwise every order is taken for new and the insert,
 * which fails on an order already there, proves it; that batch is rolled
 * back and redone with the lookup. Refusing for want of stock always reads
 * the stock locked and looks up. Replaying a batch any number of times
 * changes nothing.
 *
 * A buyer's cancel (kind ORDER_CANCEL, issue #44) in the batch is applied in
 * the same transaction, after the batch's inserts (cons_cancel.sql): the
 * order it names goes from pending_payment to cancelled and its unit back
 * to stock_left and to order_returns (for Redis: consumer/outbox.c), or
 * nothing changes when the order is not pending. It passes the fence of its
 * user like an order, and nothing else of an order's path: no order id, no
 * buyer's place, no stock to take. A batch with cancels locks the order rows
 * they name first (cons_cancel_lock.sql), then every item row of the batch
 * at once, in id order (cons_items.sql), so it never deadlocks with the
 * expiry or another batch. Each cancel applies after every order of its
 * batch: the caller keeps out of a batch an order that must see a cancel
 * before it (the worker moves it to the next batch, worker.c). */
#ifndef SECKILL_SINK_H
#define SECKILL_SINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cfg.h"
#include "order.h"

enum sink_status {
    SINK_OK = 0,         /* committed; every outcome is set */
    SINK_TRANSIENT = -1, /* connection, serialization or deadlock: retry (reconnect if needed) */
    SINK_DATA = -2,      /* the server refused the data: retry the orders one by one */
    SINK_ABORTED = -3,   /* precommit said no: rolled back, nothing written */
};

struct sink_order {
    const struct order *o;
    int64_t fence;  /* the user's lock fence */
    int outcome;    /* enum cmsg_outcome, set by sink_write */
    /* Set by sink_write for CMSG_INSERTED and CMSG_DUPLICATE: the end of the
     * order's payment window, ms since the epoch (PostgreSQL's pay_by, to
     * the millisecond), while it is pending payment; 0 for an order without
     * a window or no longer pending, and for every other outcome. */
    int64_t pay_by_ms;
    /* Set by sink_write for CMSG_REFUSED_BEFORE: the refusal the order was
     * recorded under before (a refusal's outcome); 0 otherwise. */
    int refused_as;
};

/* How sink_write went, for the metrics. */
struct sink_trace {
    bool looked_up;    /* the committed attempt looked up the orders already there */
    int redo_existing; /* attempts rolled back: an order was already there */
    int redo_stock;    /* attempts rolled back: a concurrent batch took the stock */
};

/* Called before COMMIT; non-zero rolls back (a lease was lost). */
typedef int (*sink_precommit_fn)(void *arg);

struct sink;

/* A sink that connects as the consumer's role with application_name
 * appname, on first use (sink_ready, sink_write): a database that is down or
 * refuses the password at start is a state to report and retry, not a
 * failure. -1 only when out of memory. */
int sink_open(const struct cfg *c, const char *appname, struct sink **out, char *err, size_t errlen);
void sink_close(struct sink *s);
/* Connect if not connected (a new connection takes the password the
 * configuration holds now). 0 when connected; -1 with the reason in err. */
int sink_ready(struct sink *s, char *err, size_t errlen);

/* Write n orders and cancels. Users of the batch must be locked by the
 * caller with the fences given. Outcomes are CMSG_INSERTED, CMSG_DUPLICATE,
 * CMSG_REFUSED_BEFORE (its id was refused before: a refusal is final) or a
 * rejection for an order, CMSG_CANCELLED or CMSG_CANCEL_NOOP for a
 * cancel (of two cancels of one order in a batch the first may apply, the
 * second is a noop), or CMSG_RETRY (stale fence); all CMSG_PENDING again
 * unless SINK_OK (err then says why). trace, when not NULL, is set either
 * way. */
enum sink_status sink_write(struct sink *s, struct sink_order *v, size_t n, sink_precommit_fn precommit,
                            void *arg, struct sink_trace *trace, char *err, size_t errlen);

#endif
