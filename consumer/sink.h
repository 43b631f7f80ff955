/* sink: one PostgreSQL transaction per batch of orders.
 *
 * In one transaction: advance each user's fence (a stale one refuses that
 * user's orders), lock the batch's item rows, find the orders already there,
 * decide per order what happens, insert what fits ON CONFLICT DO NOTHING and
 * take stock only for rows really inserted, record the refusals, commit.
 * Replaying a batch any number of times changes nothing. */
#ifndef SECKILL_SINK_H
#define SECKILL_SINK_H

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
 * CMSG_RETRY (stale fence, or a concurrent insert won a race). */
int sink_write(struct sink *s, struct sink_order *v, size_t n, sink_precommit_fn precommit, void *arg,
               char *err, size_t errlen);

#endif
