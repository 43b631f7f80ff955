/* inspect: the inspection views (sql/migrations/005_inspect_views.sql)
 * printed as tables, against the configured database, plus the dead-letter
 * count from Kafka. Read-only. */
#ifndef SECKILL_INSPECT_H
#define SECKILL_INSPECT_H

#include "cfg.h"

/* seckillctl inspect [--item ID]: 0 when every "must be none" section is
 * empty, 1 when one is not or a query failed, 2 on a usage error. */
int inspect_cmd(const struct cfg *c, int argc, char **argv);

#endif
