/* reconcile: prove, per item, that Redis and PostgreSQL account for every
 * unit, and repair what can be repaired without risk.
 *
 *   stock_total = Redis stock + units in flight between the item's slots
 *                 + reservations not yet persisted
 *                 + orders holding a unit (final, pending_payment, paid)
 *                 + units returned in PostgreSQL that Redis has not taken back
 *                   (order_returns not done, the order not in the returned set)
 *                 + units of a live stock change applied at one end only
 *                   (ctl/stockchg.h: added in PostgreSQL only, or withdrawn
 *                   from Redis only; --fix finishes it at the other end)
 *   Redis buyers = users with a reservation or an order holding a unit, and
 *                  the buyers of expired or cancelled orders when
 *                  sale.rebuy_after_cancel is false (true: they may be there
 *                  only while their unit is on its way back)
 *   stock_left  = stock_total - orders holding a unit
 *   no user holds two live orders
 *   no order returned twice: Redis' returned set holds exactly the returns
 *   done (and perhaps some on their way), no order the database never
 *   returned (a unit given back twice is one too many in the stock above;
 *   given_back cannot tell it, a producer's give-back counts there too)
 *   the buyers' status of every order is the database's (after the sale
 *   too: w, p, x, k; an expired or cancelled order's once its return is done)
 *   no units in flight (a transfer half done: --fix finishes it)
 *
 * An item with buckets (issue #57, common/sale/bucket.h) has one Redis slot
 * per bucket beside its own (the reserve): its Redis stock is the sum of
 * every slot's, its units in flight those a transfer gave and its receiver
 * has not received yet (common/sale/xfer.h, from each slot's record). A
 * user's buyer mark, reservation and status are in their bucket's slot, and
 * checked (and repaired) there. Each slot is read in one atomic step, the
 * slots one after the other: their sum is not one instant across shards.
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
