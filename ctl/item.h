/* item: creating an item for a sale (PostgreSQL row + Redis stock and
 * window) and showing one. */
#ifndef SECKILL_ITEM_H
#define SECKILL_ITEM_H

#include <stdint.h>

#include "cfg.h"
#include "itembk.h"

/* A sale window in ms since the epoch; 0 for an open end. queue_opens_ms:
 * when its waiting room opens (0: none; issue #58), before starts_ms, which
 * it then needs. */
struct item_window {
    int64_t starts_ms, ends_ms, queue_opens_ms;
};

/* Create or reset item_id with `stock` units on sale within w (with a
 * waiting room when w has queue_opens_ms: a new one, any earlier one's
 * queue gone), its buyers
 * given pay_within_s seconds to pay (0: no payment step; the window lives in
 * PostgreSQL alone, where the consumer reads it as it persists an order),
 * in bk->k buckets (1: none; itembk.h), whose salts it chooses into bk.
 * Refuses (returns -1 with the reason printed) when the item already has
 * orders, or when Redis holds buyers or pending reservations for it. 0 on
 * success. */
int item_create(const struct cfg *c, int64_t item_id, int64_t stock, const char *name,
                const struct item_window *w, int64_t pay_within_s, struct itembk *bk);


int item_cmd(const struct cfg *c, int argc, char **argv);

#endif
