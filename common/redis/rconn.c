#include "rconn.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "secret.h"
#include "sentinel.h"
#include "util.h"

/* The primary's generation: 1 at start, +1 per move. A connection keeps the
 * generation it was opened in as its reader's private data (hiredis leaves
 * that field to the user and never frees it), so staleness needs no table
 * and no change to the callers. */
static atomic_ulong generation = 1;

void rconn_primary_moved(void)
{
    atomic_fetch_add(&generation, 1);
}

unsigned long rconn_primary_moves(void)
{
    return atomic_load(&generation) - 1;
}

static void on_switch(const char *from, const char *to)
{
    log_notice("redis: the Sentinels moved the primary from %s to %s; reconnecting", from, to);
    rconn_primary_moved();
}

int rconn_watch_start(const struct cfg *c, char *err, size_t errlen)
{
    return sentinel_watch_start(c, on_switch, err, errlen);
}

void rconn_watch_stop(void)
{
    sentinel_watch_stop();
}

/* A demoted primary answers writes with READONLY. Every reply is built by
 * the reader's object functions: wrapping the one for strings (errors are
 * strings) catches READONLY on every connection, whichever module sent the
 * command, in one place. */
static redisReplyObjectFunctions hooked;
static void *(*plain_string)(const redisReadTask *, char *, size_t);
static pthread_once_t hook_once = PTHREAD_ONCE_INIT;

static void *string_hook(const redisReadTask *task, char *str, size_t len)
{
    if (task->type == REDIS_REPLY_ERROR && len >= 9 && memcmp(str, "READONLY ", 9) == 0)
        rconn_primary_moved();
    return plain_string(task, str, len);
}

static void hook_init(void)
{
    /* hiredis keeps its default functions private: copy them from a reader. */
    redisReader *r = redisReaderCreate();
    if (r == NULL)
        abort();
    hooked = *r->fn;
    redisReaderFree(r);
    plain_string = hooked.createString;
    hooked.createString = string_hook;
}

static int expect_ok(redisContext *rc, redisReply *r, const char *what, char *err, size_t errlen)
{
    if (r == NULL) {
        snprintf(err, errlen, "redis %s: %s", what, rc->errstr);
        return -1;
    }
    int ok = r->type == REDIS_REPLY_STATUS;
    if (!ok)
        snprintf(err, errlen, "redis %s: %s", what,
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    freeReplyObject(r);
    return ok ? 0 : -1;
}

/* ROLE's first element: "master" on a primary. A Sentinel may still name a
 * primary it has not yet seen demoted; writing there would be refused, or
 * worse, lost with it. */
static int expect_primary(redisContext *rc, const char *host, int port, char *err, size_t errlen)
{
    redisReply *r = redisCommand(rc, "ROLE");
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
             r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "master") == 0;
    if (!ok)
        snprintf(err, errlen, "redis %s:%d: %s", host, port,
                 r == NULL                       ? rc->errstr
                 : r->type == REDIS_REPLY_ERROR ? r->str
                                                : "is not a primary (ROLE); a failover may be under way");
    freeReplyObject(r);
    return ok ? 0 : -1;
}

/* AUTH [user] password with a private copy of the password, wiped at once:
 * a reload may replace the shared one meanwhile. An ACL refusal (WRONGPASS)
 * names the user only; hiredis's errstr never holds the arguments. */
static int auth(redisContext *rc, const char *host, int port, const char *user, struct secret *password,
                char *err, size_t errlen)
{
    struct secret *pw = NULL;
    if (password && !(pw = secret_dup(password))) {
        snprintf(err, errlen, "redis %s:%d: out of memory", host, port);
        return -1;
    }
    const char *p = pw ? secret_str(pw) : "";
    if (*p == '\0') { /* no password file: no AUTH, the connection is Redis's default user */
        secret_free(pw);
        return 0;
    }
    redisReply *r = *user ? redisCommand(rc, "AUTH %s %b", user, p, strlen(p))
                          : redisCommand(rc, "AUTH %b", p, strlen(p));
    secret_free(pw);
    if (r == NULL) {
        snprintf(err, errlen, "redis %s:%d: AUTH%s%s: %s", host, port, *user ? " as " : "", user, rc->errstr);
        return -1;
    }
    int ok = r->type == REDIS_REPLY_STATUS;
    if (!ok)
        snprintf(err, errlen, "redis %s:%d: AUTH%s%s: %s", host, port, *user ? " as " : "", user,
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    freeReplyObject(r);
    return ok ? 0 : -1;
}

int rconn_open(const struct cfg *c, redisContext **out, char *err, size_t errlen)
{
    return rconn_open_as(c, cfg_role_self(), out, err, errlen);
}

int rconn_open_as(const struct cfg *c, enum cfg_role role, redisContext **out, char *err, size_t errlen)
{
    return rconn_open_user(c, c->redis.user[role] ? c->redis.user[role] : "", c->redis.password[role], out,
                           err, errlen);
}

/* Connect to host:port, set the command timeout, AUTH, check ROLE (when a
 * Sentinel named it) and SELECT (not on a Cluster node: a Cluster has db 0
 * only). The connection remembers gen (rconn_broken). */
static int open_at(const struct cfg *c, const char *host, int port, const char *user, struct secret *password,
                   unsigned long gen, bool sentinels, bool cluster, redisContext **out, char *err,
                   size_t errlen)
{
    redisContext *rc = redisConnectWithTimeout(host, port, util_timeval_ms(c->redis.connect_timeout_ms));
    if (rc == NULL) {
        snprintf(err, errlen, "redis %s:%d: out of memory", host, port);
        return -1;
    }
    if (rc->err) {
        snprintf(err, errlen, "redis %s:%d: %s", host, port, rc->errstr);
        goto fail;
    }
    if (redisSetTimeout(rc, util_timeval_ms(c->redis.command_timeout_ms)) != REDIS_OK) {
        snprintf(err, errlen, "redis %s:%d: cannot set timeout", host, port);
        goto fail;
    }
    if (auth(rc, host, port, user, password, err, errlen) != 0)
        goto fail;
    if (sentinels && expect_primary(rc, host, port, err, errlen) != 0)
        goto fail;
    if (!cluster && c->redis.db != 0 &&
        expect_ok(rc, redisCommand(rc, "SELECT %d", c->redis.db), "SELECT", err, errlen) != 0)
        goto fail;
    pthread_once(&hook_once, hook_init);
    rc->reader->fn = &hooked;
    redisReaderSetPrivdata(rc->reader, (void *)(uintptr_t)gen);
    *out = rc;
    return 0;
fail:
    redisFree(rc);
    return -1;
}

int rconn_open_user(const struct cfg *c, const char *user, struct secret *password, redisContext **out,
                    char *err, size_t errlen)
{
    char host[256];
    int port = c->redis.port;
    /* Read before asking: a move while we connect makes this connection
     * stale at once rather than current on the old primary. */
    unsigned long gen = atomic_load(&generation);
    bool sentinels = c->redis.sentinels.n > 0;
    if (sentinels) {
        if (sentinel_ask(c, host, sizeof(host), &port, err, errlen) != 0)
            return -1;
    } else {
        snprintf(host, sizeof(host), "%s", c->redis.host);
    }
    return open_at(c, host, port, user, password, gen, sentinels, false, out, err, errlen);
}

int rconn_open_node(const struct cfg *c, const char *host, int port, const char *user,
                    struct secret *password, redisContext **out, char *err, size_t errlen)
{
    return open_at(c, host, port, user, password, atomic_load(&generation), false, true, out, err, errlen);
}

int rconn_broken(const redisContext *rc)
{
    return rc == NULL || rc->err != 0 || (uintptr_t)rc->reader->privdata != atomic_load(&generation);
}

int rconn_time_ms(const redisReply *r, int64_t *out)
{
    int64_t s, us;
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_STRING ||
        util_parse_i64(r->element[0]->str, 0, INT64_MAX / 1000, &s) != 0 ||
        util_parse_i64(r->element[1]->str, 0, 999999, &us) != 0)
        return -1;
    *out = s * 1000 + us / 1000;
    return 0;
}

void rconn_discard_replies(redisContext *rc, int n)
{
    for (int i = 0; i < n; i++) {
        redisReply *r = NULL;
        if (redisGetReply(rc, (void **)&r) != REDIS_OK)
            return;
        freeReplyObject(r);
    }
}
