/* outbox: the returns outbox: every unit an order gave back, expired or
 * cancelled by its buyer, goes from order_returns to Redis, each exactly
 * once (issue #44).
 *
 * PostgreSQL writes a return (an order_returns row) in the transaction that
 * expires or cancels its order (units_back, sql/migrations/016). The outbox
 * sends a batch of them to Redis:
 * - The batch: the rows of a statement that answers returns (order id, item
 *   id, user id, the state that gave the unit back, when in ms), given with
 *   ob_take (the deadline pass's own, deadline.h), or the returns Redis does
 *   not have yet whose next try is due (cons_returns_due.sql: of an earlier
 *   pass, of another consumer or of one that crashed, expired or
 *   cancelled), ob_retry. A row whose values the table's checks do not allow
 *   is said and left where it is, never guessed.
 * - ob_send: for each item of the batch, in one pipelined round trip (one
 *   per primary on a Cluster), seckill_return (consumer/lua/
 *   seckill_return.lua: Redis gives each order id's unit back once, so a
 *   retry, a replay or two consumers sending one return give it once), then
 *   seckill_mark (rstate.h: the order's state, expired or cancelled, with
 *   the time of the change, into the item's orders hash, only forward). An
 *   item with buckets (bucket.h) gets its units back in its reserve, the
 *   item's own slot, and its buyers are taken out in their buckets, where
 *   their states are marked too: one seckill_release per bucket, each
 *   once by the bucket's own returned set. A return whose calls Redis
 *   took, held by the replicas redis.min_replicas_ack asks, is marked done
 *   (cons_return_done.sql), so a crash between them sends them all again;
 *   one that failed waits longer each
 *   time (from 100 ms, doubling, up to consumer.return_backoff_cap_ms:
 *   cons_return_later.sql) and stays in the table across restarts until it
 *   is done.
 * - ob_count: the gauge of returns not done, once per
 *   consumer.expire_interval_ms at most.
 *
 * Its statements (ob_stmts) go on its caller's PostgreSQL session, whose
 * round trips it runs (the caller prepares them with its own); a failure is
 * said once while it lasts with the caller's say_pg ("expiry: postgres"),
 * so one outage is one line. Its Redis connection is its own, opened on use
 * and again after a loss. Its log lines are the expiry thread's
 * ("expiry: "). A struct outbox is the caller's (embedded), and belongs to
 * the thread of that session. */
#ifndef SECKILL_OUTBOX_H
#define SECKILL_OUTBOX_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cfg.h"
#include "log.h"
#include "ostate.h"
#include "pgtrip.h"
#include "rfunc.h"
#include "rpipe.h"
#include "rstate.h"

/* The outbox's statements, for its caller's session (pgsess_conf.stmts). */
#define OB_NSTMTS 4
extern const struct pgsess_stmt ob_stmts[OB_NSTMTS];

/* One return. */
struct ob_row {
    int64_t order_id, item_id, user_id;
    int64_t changed_ms;   /* when it expired or was cancelled (order_returns.created_at) */
    enum ost_state state; /* OST_EXPIRED or OST_CANCELLED (ostate.h) */
    bool ok;              /* Redis has its unit back and its state (or holds no item to give them to) */
    int salt;             /* its buyer's slot: their bucket's salt, BUCKET_HOME without buckets */
};


struct outbox {
    const struct cfg *cfg;
    struct pgtrip *trip;       /* the caller's */
    struct log_repeat *say_pg; /* the caller's */
    struct rp *rp;
    struct rp_batch batch;
    struct rfunc return_fn; /* seckill_return */
    struct rfunc release_fn; /* seckill_release (an item with buckets: bucket.h) */
    struct bkmap *bk;        /* the items' buckets */
    struct rs rs;           /* the orders' states (rstate.h) */
    struct log_repeat say_redis, say_missing, say_short;
    int64_t counted_ms;  /* when the gauge of returns not done was last read */
    struct ob_row *rows; /* the batch, sorted by item (and slot, once sent) */
    size_t nrows, cap;
    const char **argv; /* room for one call: keys, flag, two per order */
    char (*vals)[24];  /* the orders' ids and users as text */
    struct pgarr ids;  /* the orders of a mark (cons_return_done, cons_return_later) */
};

/* Ready o for c, on the caller's trip (its session prepares ob_stmts) with
 * the caller's say_pg; nothing is allocated or connected yet. */
void ob_init(struct outbox *o, const struct cfg *c, struct pgtrip *trip, struct log_repeat *say_pg);
/* Close the Redis connection and free. */
void ob_free(struct outbox *o);

/* Room for a batch of limit returns: 0, or -1 out of memory (said). */
int ob_room(struct outbox *o, size_t limit);
/* The batch is the rows of res (a statement's answer in the columns of
 * cons_returns_due.sql: order, item, user, reason, when), up to the room
 * ob_room made; a row whose order id is NULL is none (skipped). */
void ob_take(struct outbox *o, const PGresult *res);
/* How many returns the batch holds. */
size_t ob_size(const struct outbox *o);
/* Send the batch to Redis and mark its returns done, or for a later try.
 * 0, or -1 (PostgreSQL failed: the marks not written; the returns are sent
 * again, which changes nothing). */
int ob_send(struct outbox *o);
/* The batch is the returns due for a retry, up to limit, and is sent (as
 * ob_send). 0, or -1 (PostgreSQL failed). */
int ob_retry(struct outbox *o, int limit);
/* The gauge of returns not done (cons_returns_pending.sql), unless it was
 * read less than consumer.expire_interval_ms ago. 0, or -1. */
int ob_count(struct outbox *o);

#endif
