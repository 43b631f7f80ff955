/* pgconn: connecting to PostgreSQL as the configuration says, with the
 * credentials of the program's role (cfg_role_set). Any thread may call it:
 * the password is copied out of the running configuration under its lock, so
 * a reload that replaces it is safe. */
#ifndef SECKILL_PGCONN_H
#define SECKILL_PGCONN_H

#include <libpq-fe.h>
#include <stddef.h>

#include "cfg.h"

/* Connect as the program's role (cfg_role_self) with keyword/value
 * parameters (no conninfo string is ever built from settings) and route
 * server notices to the logger.
 * 0 and *out, or -1 with the reason in err (libpq never echoes the password). */
int pgconn_open(const struct cfg *c, const char *application_name, PGconn **out, char *err, size_t errlen);
/* The same as role (whose password cfg_load must have read: cfg_role_set's
 * mask); tests and tools that act for another program. */
int pgconn_open_as(const struct cfg *c, enum cfg_role role, const char *application_name, PGconn **out,
                   char *err, size_t errlen);

#endif
