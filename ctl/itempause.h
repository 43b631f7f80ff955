/* itempause: seckillctl item pause and item resume (issue #57): an operator
 * stops a sale for a while and starts it again, without touching its stock,
 * window or orders.
 *
 * The database first (items.paused, migration 018), then Redis' copy (the
 * window hash's paused, keys.h), which seckill_reserve reads: while it is
 * set, a buyer who holds no unit is answered 503 paused with Retry-After
 * (docs/api.md), a buyer who holds one still 409; orders already taken go
 * on to the database, be paid, cancelled or expire as before; a waiting
 * room admits nobody (its waiters wait; an admission given before the pause
 * is not spent by a paused answer). If the command fails between the two,
 * Redis says otherwise than the database until it is run again, or until
 * reconcile --fix, which sets Redis' copy from the database's. */
#ifndef SECKILL_ITEMPAUSE_H
#define SECKILL_ITEMPAUSE_H

#include "cfg.h"

/* seckillctl item pause|resume --id ID: argv[0] is "pause" or "resume".
 * 0 done, 1 not, 2 usage. */
int itempause_cmd(const struct cfg *c, int argc, char **argv);

#endif
