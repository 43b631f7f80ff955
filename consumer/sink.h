/* sink: one PostgreSQL transaction per batch of orders.
 *
 * In one transaction: advance each user's fence (a stale one refuses that
 * user's orders), read the stock of the batch's items, decide per order what
 * happens, insert what fits and take stock for it, record the refusals,
 * commit. The orders already there are looked up first only when the last
 * batch met one: otherwise every order is taken for new and the insert,
 * which fails on an order already there, proves it; that batch is rolled
 * back and redone with the lookup. Refusing for want of stock always reads
 * the stock locked and looks up. Replaying a batch any number of times
 * changes nothing. */
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

/* Write n orders. Users of the batch must be locked by the caller with the
 * fences given. Outcomes are CMSG_INSERTED, CMSG_DUPLICATE, a rejection, or
 * CMSG_RETRY (stale fence); all CMSG_PENDING again unless SINK_OK (err then
 * says why). trace, when not NULL, is set either way. */
enum sink_status sink_write(struct sink *s, struct sink_order *v, size_t n, sink_precommit_fn precommit,
                            void *arg, struct sink_trace *trace, char *err, size_t errlen);

#endif
