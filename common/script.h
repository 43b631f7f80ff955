/* script: server-side Lua scripts, loaded once and run by SHA.
 *
 * Script sources live in their own .lua files and are compiled into the
 * binary (see scripts/embed), so a running daemon never depends on a path. */
#ifndef SECKILL_SCRIPT_H
#define SECKILL_SCRIPT_H

#include <hiredis/hiredis.h>
#include <stddef.h>

#include "log.h"

/* Belongs to the thread that owns the connection it is loaded on. */
struct script {
    const char *name;      /* for messages */
    const char *source;    /* the Lua text */
    char sha[41];          /* filled by script_load */
    struct log_repeat say; /* a refused SCRIPT LOAD, said once while it lasts */
};

#define SCRIPT_INIT(name, source) { name, source, { 0 } }

/* SCRIPT LOAD; stores the SHA. 0 or -1. A refusal (NOPERM, OOM ...) is
 * logged once while the same refusal repeats, and said over once a load
 * works. */
int script_load(redisContext *rc, struct script *s);

/* EVALSHA with nkeys keys followed by nargs arguments (binary-safe). Loads the
 * script first when it has no SHA, and reloads and retries once on NOSCRIPT
 * (Redis restarted or SCRIPT FLUSH). Returns the reply (caller frees), or
 * NULL when the connection failed (rc->errstr says why). */
redisReply *script_eval(redisContext *rc, struct script *s, int nkeys, int nargs, const char **argv,
                        const size_t *argvlen);

/* Queue an EVALSHA in the output buffer, for pipelining: several calls then
 * as many redisGetReply(). The script must be loaded. 0 or -1. */
int script_append(redisContext *rc, const struct script *s, int nkeys, int nargs, const char **argv,
                  const size_t *argvlen);

/* True if r is a NOSCRIPT error reply. */
int script_is_noscript(const redisReply *r);

#endif
