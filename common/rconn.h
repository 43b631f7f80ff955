/* rconn: connecting to Redis as the configuration says. */
#ifndef SECKILL_RCONN_H
#define SECKILL_RCONN_H

#include <hiredis/hiredis.h>
#include <stddef.h>

#include "cfg.h"

/* Connect, set the command timeout, AUTH and SELECT as configured.
 * 0 and *out, or -1 with a message (never containing the password) in err. */
int rconn_open(const struct cfg *c, redisContext **out, char *err, size_t errlen);

/* True when the context cannot be used again and must be reopened:
 * I/O error, EOF, timeout or protocol error. */
int rconn_broken(const redisContext *rc);

/* Read and drop the replies of n pipelined commands whose answers do not
 * matter (best-effort writes), stopping at the first broken read. */
void rconn_discard_replies(redisContext *rc, int n);

#endif
