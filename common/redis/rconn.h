/* rconn: connecting to Redis as the configuration says, and knowing when a
 * connection no longer reaches the primary.
 *
 * With redis.sentinels set, rconn_open() asks the Sentinels where the
 * primary is and checks with ROLE that it is one; without, it connects to
 * redis.host. Every connection remembers the primary's generation it was
 * opened in; rconn_primary_moved() (the Sentinel watcher's switch, or a
 * READONLY reply seen on any connection: the server was demoted) starts a
 * new one, and from then on rconn_broken() is true for every older
 * connection, so each owner reopens its own at its next use, through the
 * same code path as after a lost connection. */
#ifndef SECKILL_RCONN_H
#define SECKILL_RCONN_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

#include "cfg.h"

/* Connect (through the Sentinels when configured), set the command
 * timeout, AUTH and SELECT as configured, as the program's own role
 * (cfg_role_self: redis.<role>_user with the password its file holds).
 * 0 and *out, or -1 with a message (never containing the password) in err. */
int rconn_open(const struct cfg *c, redisContext **out, char *err, size_t errlen);
/* The same as another role (tools and tests that act as several; the role's
 * password file must have been read: cfg_role_set). */
int rconn_open_as(const struct cfg *c, enum cfg_role role, redisContext **out, char *err, size_t errlen);
/* The same as an ACL user that is no role of the configuration (the dev
 * stack's own users in the tests). With a password: AUTH user password
 * (AUTH password when user is empty); without one (NULL or empty), no AUTH.
 * password may be NULL; the caller's secret, read under its lock. */
int rconn_open_user(const struct cfg *c, const char *user, struct secret *password, redisContext **out,
                    char *err, size_t errlen);
/* One node of a Redis Cluster, host:port as its slot map names it, as the ACL
 * user and password of rconn_open_user (no Sentinel, no SELECT: a Cluster
 * has db 0 only). Used by rcluster, which routes each command to its node. */
int rconn_open_node(const struct cfg *c, const char *host, int port, const char *user,
                    struct secret *password, redisContext **out, char *err, size_t errlen);

/* True when the context cannot be used again and must be reopened:
 * I/O error, EOF, timeout, protocol error, or opened before the primary
 * last moved. */
int rconn_broken(const redisContext *rc);

/* The primary has moved (or may have): every open connection is stale. */
void rconn_primary_moved(void);
/* How many times the primary moved since the process started (metrics). */
unsigned long rconn_primary_moves(void);

/* With redis.sentinels: start the process's Sentinel watcher, which logs
 * each switch and calls rconn_primary_moved() (no-op without Sentinels).
 * 0, or -1 with err. Stop it before the configuration is freed. */
int rconn_watch_start(const struct cfg *c, char *err, size_t errlen);
void rconn_watch_stop(void);

/* Read and drop the replies of n pipelined commands whose answers do not
 * matter (best-effort writes), stopping at the first broken read. */
void rconn_discard_replies(redisContext *rc, int n);

/* The Redis clock in milliseconds from a reply to TIME. 0, or -1 when r is
 * not TIME's two-string array. */
int rconn_time_ms(const redisReply *r, int64_t *out);

#endif
