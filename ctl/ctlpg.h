/* ctlpg: the PostgreSQL calls seckillctl's commands share. Every failure is
 * printed once, as "seckillctl: WHAT: server message", where it happens. */
#ifndef SECKILL_CTLPG_H
#define SECKILL_CTLPG_H

#include <libpq-fe.h>
#include <stddef.h>
#include <stdint.h>

#include "cfg.h"

/* Connect as the configuration says. NULL after printing why. */
PGconn *ctlpg_open(const struct cfg *c);

/* Run sql with n text parameters; the result when its status is want, else
 * NULL after printing what failed. The caller PQclears. */
PGresult *ctlpg_exec(PGconn *pg, const char *sql, int n, const char *const *params, ExecStatusType want,
                     const char *what);

/* Run a statement without parameters that returns nothing (BEGIN, COMMIT).
 * 0, or -1 after printing. */
int ctlpg_cmd(PGconn *pg, const char *sql, const char *what);

/* Every item id in the database, ascending, into a new array. 0 or -1. */
int ctlpg_item_ids(PGconn *pg, int64_t **ids, size_t *n);

/* Column col of row as an int64 (strictly parsed); -1 for NULL or garbage,
 * which the queries here never return for the columns read this way. */
int64_t ctlpg_i64(const PGresult *res, int row, int col);

#endif
