/* rfunc: the programs' Redis functions (issue #34), called by name.
 *
 * The Lua lives in four libraries, one file each, compiled into every binary
 * (scripts/embed): seckill_producer (producer/lua), seckill_consumer
 * (consumer/lua), seckill_lock (common/sale/lua: the consumer's and seckillctl's
 * locks) and seckill_ctl (ctl/lua). The daemons never load code: their ACL
 * users may FCALL and FUNCTION LIST, not FUNCTION LOAD, SCRIPT LOAD or EVAL,
 * so a stolen daemon password runs the functions an operator loaded, never
 * its own Lua. The admin user loads them (rfunc_load: `seckillctl functions
 * load`; the dev stack's `scripts/stack up` loads the same files).
 *
 * Each library carries a version (`local VERSION = N`, read back with the
 * function <library>_version). A daemon checks its libraries when it
 * connects (rfunc_check) and refuses to work against a missing or older
 * one, saying which, what it found and the command that loads it. Functions
 * live in the dataset: they are replicated and kept in the RDB and the AOF,
 * so a replica the Sentinels promote has them; a Redis that lost its files,
 * or a FUNCTION FLUSH, leaves none, and then each call answers
 * rfunc_is_missing() until an operator loads them again.
 *
 * A Redis Cluster shares no functions between its shards: each primary
 * holds its own copy (replicated to its replicas), so loading and checking
 * visit every primary (rfunc_check_all, `seckillctl functions`), and a shard
 * without them is named by its address.
 *
 * No state: any thread may call these, each on its own connection. */
#ifndef SECKILL_RFUNC_H
#define SECKILL_RFUNC_H

#include <hiredis/hiredis.h>
#include <stddef.h>

#include "cfg.h"

enum rfunc_lib { RFUNC_LIB_PRODUCER, RFUNC_LIB_CONSUMER, RFUNC_LIB_LOCK, RFUNC_LIB_CTL, RFUNC_LIBS };

/* One function of a library: its name in Redis ("seckill_reserve"). */
struct rfunc {
    const char *name;
    enum rfunc_lib lib;
};

#define RFUNC_INIT(name, lib) { name, lib }

/* The library's name ("seckill_producer") and its Lua text (the file). */
const char *rfunc_lib_name(enum rfunc_lib lib);
const char *rfunc_lib_source(enum rfunc_lib lib);
/* This build's version of the library (its `local VERSION = N`), or -1 when
 * the text has none (a build error the first check reports). */
int rfunc_lib_version(enum rfunc_lib lib);

/* The version of the library Redis holds: 0 and *out (-1 when it has none,
 * 0 when it has one without a version function), or -1 with err (the
 * connection failed, or the user may not FUNCTION LIST). */
int rfunc_loaded_version(redisContext *rc, enum rfunc_lib lib, int *out, char *err, size_t errlen);

/* Is the library loaded at this build's version or a newer one? 0; -1 with
 * err when the connection failed or Redis refused; -2 with err when it is
 * missing or older (err names the library, both versions and the command
 * that loads it). */
int rfunc_check(redisContext *rc, enum rfunc_lib lib, char *err, size_t errlen);

/* rfunc_check on every primary of p (the one Redis without a Cluster):
 * 0 when each holds the library; -2 with err when one lacks it or holds an
 * older one, said before any -1 (waiting would not mend it); -1 with err
 * when one could not be asked. On a Cluster err starts with the primary's
 * address ("on 127.0.0.1:16402: ..."). */
struct rp;
int rfunc_check_all(struct rp *p, enum rfunc_lib lib, char *err, size_t errlen);

/* A daemon's start step (a daemon_attempt_fn, common/base/daemon.h): connect as
 * the program's own user and check each of its n libraries on every primary
 * (rfunc_check_all). -1 with err
 * while Redis cannot be reached or refuses (worth waiting for); 0 when the
 * check is done: need->missing is then 1, and need->why says what, when a
 * library is missing or older, which waiting would not mend (an operator
 * must load it): the daemon refuses to start. */
struct rfunc_need {
    const struct cfg *cfg;
    const enum rfunc_lib *libs;
    size_t n;
    int missing;
    char why[512];
};
int rfunc_need_attempt(void *arg, char *err, size_t errlen);

/* FUNCTION LOAD REPLACE this build's library, unless Redis holds a newer
 * one (then -2 with err: an older seckillctl never takes functions away
 * from newer daemons). 0 and *was (the version replaced, -1 none), or -1
 * with err. Needs +function|load (the admin user). */
int rfunc_load(redisContext *rc, enum rfunc_lib lib, int *was, char *err, size_t errlen);

/* True if r is Redis's answer to an FCALL of a function it does not hold
 * (never loaded, flushed, or lost with the dataset). */
int rfunc_is_missing(const redisReply *r);

/* What to say about f missing, for the log: the function, its library and
 * version, and the command that loads it. */
void rfunc_missing_text(const struct rfunc *f, char *buf, size_t len);

/* What went wrong with f's reply r on rc, for a message: the connection's
 * error (r NULL), rfunc_missing_text(), the error reply, or "unexpected
 * reply". Returns buf. */
const char *rfunc_error_text(const struct rfunc *f, const redisContext *rc, const redisReply *r, char *buf,
                             size_t len);

#endif
