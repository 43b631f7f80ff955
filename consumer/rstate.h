/* rstate: the consumer's one writer of order states into Redis (issue #56).
 *
 * PostgreSQL decides what becomes of an order after the sale; the buyers'
 * status calls read it from Redis, from the item's orders hash, where
 * seckill_mark (consumer/lua/seckill_return.lua, a function of the
 * seckill_return library) copies it, only forward and safe to repeat. Three
 * modules copy such a change once PostgreSQL has it: settle.c marks an
 * order persisted pending payment OST_PENDING_PAYMENT, payments.c a paid one
 * OST_PAID, outbox.c an expired or cancelled one OST_EXPIRED or
 * OST_CANCELLED with its unit given back. Each hands its rows here (order,
 * item, state, detail), and this module alone builds the calls and reads
 * their answers:
 * - rs_add puts into the caller's batch one seckill_mark call per item and
 *   slot of the rows given since the last one, routed by that slot's orders
 *   hash (on a Cluster, its primary): an item in buckets (bucket.h) keeps
 *   each order's state in its buyer's bucket. A call carries all of its
 *   slot's rows:
 *   the function takes any number and reads and writes them
 *   MARK_CHUNK at a time. The calls go after what the caller put in the
 *   batch before (a settlement, a return): the same key's connection, so the
 *   same round trip, and after it.
 * - It marks the batch durable (rp_durable, rpipe.h): a state that fewer
 *   replicas hold than redis.min_replicas_ack asks would be lost at a
 *   failover, and the buyer shown an older one for good.
 * - rs_read reads the replies of its calls once, after the caller's rp_run:
 *   which calls answered, how many found the function missing, the first
 *   error's words; and when the replicas fell short, none is done.
 * What to do with a call that is not done (a backlog, a retry, a backoff)
 * stays the caller's: its rows are safe to send again.
 *
 * A struct rs is the caller's (embedded), and belongs to one thread with the
 * batch it fills; its fields are private. */
#ifndef SECKILL_RSTATE_H
#define SECKILL_RSTATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bucket.h"
#include "cfg.h"
#include "ostate.h"
#include "rfunc.h"
#include "rpipe.h"

/* One order's new state. */
struct rs_row {
    int64_t order_id, item_id;
    enum ost_state state; /* one seckill_mark writes (ost_writer OST_BY_MARK) */
    int64_t detail_ms;    /* its DETAIL: the end of the payment window, or when it changed */
    int salt;             /* the slot whose orders hash holds it: its buyer's bucket's salt, or
                             BUCKET_HOME (bucket.h) for an item without buckets */
};

/* What the replies of the batch's calls said (rs_read). */
struct rs_said {
    int calls;           /* seckill_mark calls rs_add put in the batch */
    int answered;        /* of them answered (not an error) */
    int done;            /* answered and held by the replicas asked: the states are in Redis */
    int missing;         /* answered "function not found" */
    bool replicas_short; /* fewer replicas than asked hold the batch: none is done */
    char why[256];       /* the first error reply's words ("" when none) */
};

struct rs {
    const struct cfg *cfg;
    struct rfunc mark_fn; /* seckill_mark */
    struct rs_row *rows;   /* given since the last rs_add */
    struct rs_row **order; /* rs_add: them by item */
    size_t nrows, caprows;
    int *calls;      /* each call's index in the batch, since rs_begin */
    bool *answered;  /* rs_read: each call answered */
    bool *done;      /* and is held by the replicas */
    int ncalls, capcalls;
    const char **argv; /* one call's arguments, and their text */
    char (*vals)[24];
    size_t capargs;
};

/* Zero the writer for the configuration c (its redis.key_prefix); nothing
 * is allocated yet. rs_free frees what its calls grew. */
void rs_init(struct rs *w, const struct cfg *c);
void rs_free(struct rs *w);

/* A new batch: forget the calls of the last one and any row not added. */
void rs_begin(struct rs *w);
/* Give one row for the next rs_add. 0, or -1: out of memory, or a state
 * seckill_mark does not write (nothing is kept). */
int rs_put(struct rs *w, const struct rs_row *row);
/* Add one seckill_mark call per item and slot of the rows given since the
 * last rs_add to b (rows of one slot keep their order) and mark b durable. The
 * calls added (0: no rows), or -1: out of memory, an item's key too long;
 * the rows are dropped either way, b may hold some of the calls. */
int rs_add(struct rs *w, struct rp_batch *b);
/* After rp_run(b): read the replies of every call since rs_begin into
 * *said (see the contract). */
void rs_read(struct rs *w, const struct rp_batch *b, struct rs_said *said);
/* Whether call k (0 for the first rs_add added since rs_begin, in their
 * order) is done: answered, and held by the replicas. After rs_read.
 * rs_answered: answered, whatever the replicas hold (for a caller that says
 * the replicas itself, with its own calls). */
bool rs_done(const struct rs *w, int k);
bool rs_answered(const struct rs *w, int k);
/* What to say when said->missing: the function, its library and version,
 * and the command that loads it (rfunc_missing_text). */
void rs_missing_text(const struct rs *w, char *buf, size_t len);

#endif
