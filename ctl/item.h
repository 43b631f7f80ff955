/* item: creating an item for a sale (PostgreSQL row + Redis stock). */
#ifndef SECKILL_ITEM_H
#define SECKILL_ITEM_H

#include <stdint.h>

#include "cfg.h"

/* Create or reset item_id with `stock` units. Refuses (returns -1 with the
 * reason printed) when the item already has orders, or when Redis holds
 * buyers or pending reservations for it. 0 on success. */
int item_create(const struct cfg *c, int64_t item_id, int64_t stock, const char *name);

int item_cmd(const struct cfg *c, int argc, char **argv);

#endif
