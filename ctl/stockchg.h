/* stockchg: an item's stock changed during its sale (issue #57):
 * `seckillctl item add-stock` and `item withdraw`, each once per change id,
 * and the halves reconcile finishes.
 *
 * A change is applied once at each end under its id: in PostgreSQL a row of
 * item_stock_changes, written in the transaction that moves the item's
 * stock_total and stock_left (ctl/sql/stock_change.sql); in Redis a field of
 * the item's changes hash, written by the function call that moves its stock
 * (seckill_stock_change). So the same command run again with the same
 * --change-id finishes what a crash left half done, and changes nothing more.
 *
 * The order of the two ends keeps every unit sold at most once:
 * - units added go to PostgreSQL first, then to Redis, where buyers take
 *   them;
 * - units withdrawn come out of Redis first, where only units no one holds
 *   are (a reservation, an order hold theirs elsewhere; a withdrawal larger
 *   than Redis' stock is refused and changes nothing), then out of
 *   PostgreSQL.
 * Between the halves the database counts units Redis does not offer, never
 * the other way round: a crash there keeps units out of the sale until the
 * change is finished, and sells none twice. reconcile counts such units as
 * "in flight" (its stock equation) and --fix finishes the change. */
#ifndef SECKILL_STOCKCHG_H
#define SECKILL_STOCKCHG_H

#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

#include "cfg.h"
#include "rpipe.h"

/* The longest change id: [A-Za-z0-9._:-], 1 to 64 characters (the table's
 * CHECK, migration 018). */
#define STOCKCHG_ID_MAX 64

/* What one end of a change did. */
enum stockchg_result {
    STOCKCHG_APPLIED,      /* applied now */
    STOCKCHG_ALREADY,      /* the id was applied before: nothing changed */
    STOCKCHG_SHORT,        /* Redis: fewer units than withdrawn are free: nothing changed */
    STOCKCHG_NO_ITEM,      /* the item is not there (not created, or not loaded in Redis) */
    STOCKCHG_OTHER_CHANGE, /* the id was recorded with another item or other units */
    STOCKCHG_FAILED,       /* the call failed (said on stderr); it may have run: run it again */
};

/* A valid change id? */
bool stockchg_id_ok(const char *id);

/* The Redis end: units (> 0 added, < 0 withdrawn) for item under id, on p
 * (durable: a failover does not lose it). *stock: the stock after (or as
 * found). */
enum stockchg_result stockchg_redis(struct rp *p, const struct cfg *c, int64_t item, const char *id,
                                    int64_t units, int64_t *stock);

/* The PostgreSQL end, in a transaction of its own. */
enum stockchg_result stockchg_pg(PGconn *pg, int64_t item, const char *id, int64_t units);

/* Redis' record of item's changes := the database's (item load, after Redis
 * lost the item: a change run again must still be applied once there), in
 * one durable batch. 0, or -1 after saying why. */
int stockchg_restore(PGconn *pg, struct rp *p, const struct cfg *c, int64_t item);

/* Forget item's changes at both ends: item create, a new sale of the item
 * (it has no orders). 0, or -1 after saying why. */
int stockchg_forget(PGconn *pg, struct rp *p, const struct cfg *c, int64_t item);

/* The changes of an item applied at one end only, for reconcile. */
struct stockchg_half {
    char id[STOCKCHG_ID_MAX + 1];
    int64_t units;
    bool in_pg; /* in PostgreSQL only (else in Redis only) */
};
struct stockchg_halves {
    struct stockchg_half *v;
    size_t n;
    /* The units they keep out of Redis' stock against stock_total: an
     * addition in PostgreSQL only, a withdrawal in Redis only. */
    int64_t inflight;
};

/* Compare item's changes in PostgreSQL with Redis' record (changes, the
 * changes hash as HGETALL answers it) into *out. 0, or -1 after saying why. */
int stockchg_halves(PGconn *pg, int64_t item, const redisReply *changes, struct stockchg_halves *out);
void stockchg_halves_free(struct stockchg_halves *h);
/* Say each half change, as reconcile's problems. */
void stockchg_halves_say(int64_t item, const struct stockchg_halves *h);
/* Finish each half change at its other end (reconcile --fix), saying what
 * became of it. 0, or -1 when a call failed. */
int stockchg_finish(PGconn *pg, struct rp *p, const struct cfg *c, int64_t item,
                    const struct stockchg_halves *h);

/* item show's line of the item's changes: how many, the units added and
 * withdrawn, and the last one. Nothing without changes. 0, or -1 after
 * saying why. */
int stockchg_show(PGconn *pg, int64_t item);

/* seckillctl item add-stock|withdraw --id ID --units N [--change-id ID]:
 * argv[0] is "add-stock" or "withdraw". 0 done (or done before), 1 not
 * done, 2 usage. */
int stockchg_cmd(const struct cfg *c, int argc, char **argv);

#endif
