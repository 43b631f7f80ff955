/* pgconn: connecting to PostgreSQL as the configuration says. */
#ifndef SECKILL_PGCONN_H
#define SECKILL_PGCONN_H

#include <libpq-fe.h>
#include <stddef.h>

#include "cfg.h"

/* Connect with keyword/value parameters (no conninfo string is ever built
 * from settings) and route server notices to the logger.
 * 0 and *out, or -1 with the reason in err (libpq never echoes the password). */
int pgconn_open(const struct cfg *c, const char *application_name, PGconn **out, char *err, size_t errlen);

#endif
