/* reconcile: prove, per item, that Redis and PostgreSQL account for every
 * unit, and repair what can be repaired without risk.
 *
 *   stock_total = Redis stock + reservations not yet persisted + orders
 *   Redis buyers = users with a reservation or an order
 *   stock_left  = stock_total - orders
 *   no user holds two orders
 *
 * A sale in flight moves units between the terms while they are read, so a
 * failing check is read again a few times before it is reported. */
#ifndef SECKILL_RECONCILE_H
#define SECKILL_RECONCILE_H

#include "cfg.h"

/* seckillctl reconcile [--item ID] [--fix]: 0 when every check holds (after
 * the fixes, with --fix), 1 when one does not, 2 on a usage error. */
int reconcile_cmd(const struct cfg *c, int argc, char **argv);

#endif
