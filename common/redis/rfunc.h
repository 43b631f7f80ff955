/* rfunc: the programs' Redis functions (issue #34), called by name.
 *
 * The Lua lives in libraries, one file each, compiled into every binary
 * (scripts/embed) and listed by the layer that knows them
 * (common/sale/funclibs.h): this module takes a library as its name and
 * text, and knows none by name. The daemons never load code: their ACL
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
 * RP_REPLY_NO_FUNCTION (rp_classify, rpipe.h) until an operator loads them
 * again.
 *
 * A Redis Cluster shares no functions between its shards: each primary
 * holds its own copy (replicated to its replicas), so loading and checking
 * visit every primary (rfunc_check_all, rfunc_load_all: the daemons' checks
 * and `seckillctl functions`), and a shard without them is named by its
 * address.
 *
 * Sits above rpipe: it calls functions through rp_fcall and visits the
 * primaries of an rp; rpipe knows nothing of it.
 *
 * No state: any thread may call these, each on its own connection (or its
 * own rp). */
#ifndef SECKILL_RFUNC_H
#define SECKILL_RFUNC_H

#include <hiredis/hiredis.h>
#include <stddef.h>

#include "cfg.h"
#include "rpipe.h"

/* A library: its name in Redis ("seckill_producer") and its Lua text (the
 * file, as built in). Which libraries there are is the sale's business, not
 * the link layer's: common/sale/funclibs.h lists them. */
struct rfunc_lib {
    const char *name;
    const char *source;
};

/* One function of a library: its name in Redis ("seckill_reserve"). */
struct rfunc {
    const char *name;
    const struct rfunc_lib *lib;
};

#define RFUNC_INIT(name, lib) { name, lib }

/* This build's version of the library (its `local VERSION = N`), or -1 when
 * the text has none (a build error the first check reports). */
int rfunc_lib_version(const struct rfunc_lib *lib);

/* The version of the library Redis holds: 0 and *out (-1 when it has none,
 * 0 when it has one without a version function), or -1 with err (the
 * connection failed, or the user may not FUNCTION LIST). */
int rfunc_loaded_version(redisContext *rc, const struct rfunc_lib *lib, int *out, char *err, size_t errlen);

/* What a check or a load of a library found. The values keep the error
 * idiom (0 fine, -1 failed) for callers that only tell those apart. */
enum rfunc_status {
    RFUNC_OK = 0,
    /* Redis could not be asked, or refused what was asked: the connection
     * failed, an ACL without FUNCTION LIST (or LOAD), a load it rejected.
     * For a check, waiting may mend it. */
    RFUNC_UNREACHABLE = -1,
    /* The library is missing, or older than this build's (or this build's
     * text has no version): waiting will not mend it, an operator must load
     * it. A daemon does not start, or stops taking work, while it lasts. */
    RFUNC_MISSING = -2,
    /* rfunc_load: Redis holds a newer version, left in place. */
    RFUNC_NEWER = -3,
};

/* Is the library loaded at this build's version or a newer one? RFUNC_OK,
 * or RFUNC_UNREACHABLE or RFUNC_MISSING with err (for a missing or older
 * one, err names the library, both versions and the command that loads
 * it). */
enum rfunc_status rfunc_check(redisContext *rc, const struct rfunc_lib *lib, char *err, size_t errlen);

/* What one primary answered, for a caller that reports each one
 * (`seckillctl functions`): its index among rp_nodes() (rp_node_name says
 * where), its status, and unless RFUNC_OK what went wrong there, without the
 * address. was: rfunc_load_all's version replaced (-1: none). */
struct rfunc_node {
    int node;
    enum rfunc_status st;
    int was;
    const char *why;
};
typedef void rfunc_node_fn(void *arg, const struct rfunc_node *n);

/* rfunc_check on every primary of p (the one Redis without a Cluster), the
 * one check of the daemons (their start, each new connection and slot map)
 * and of `seckillctl functions check`. each, when not NULL, hears every
 * primary's answer in turn; without it the walk ends at the first missing.
 * - RFUNC_MISSING with err when any primary asked lacks the library or
 *   holds an older one: said before any unreachable one, for waiting
 *   would not mend it.
 * - RFUNC_UNREACHABLE with err when no primary could be asked: one Redis
 *   that is down or refuses, or a Cluster none of whose primaries answer.
 * - RFUNC_OK otherwise: every primary asked holds it. On a Cluster a
 *   primary that cannot be asked is passed over while another one was
 *   asked: it can run no command either, so there is nothing to refuse
 *   for it; its commands fail on their own (RP_NOT_SENT, RP_UNKNOWN), the
 *   slot map that names its successor is a new map, checked again (the
 *   producer's link), and a successor without the library answers
 *   RP_REPLY_NO_FUNCTION, which every caller reports. Refusing instead
 *   would stop the other shards' sales for one shard's outage.
 * On a Cluster err starts with the primary's address ("on
 * 127.0.0.1:16402: ..."). */
enum rfunc_status rfunc_check_all(struct rp *p, const struct rfunc_lib *lib, rfunc_node_fn *each, void *arg,
                                  char *err, size_t errlen);

/* A daemon's start step (a daemon_attempt_fn, common/base/daemon.h): connect as
 * the program's own user and check each of its n libraries on every primary
 * (rfunc_check_all). -1 with err while Redis cannot be reached or refuses
 * (RFUNC_UNREACHABLE: worth waiting for); 0 when the check is done:
 * need->missing is then 1, and need->why says what, when a library is
 * RFUNC_MISSING, which waiting would not mend (an operator must load it):
 * the daemon refuses to start. */
struct rfunc_need {
    const struct cfg *cfg;
    const struct rfunc_lib *const *libs;
    size_t n;
    int missing;
    char why[512];
};
int rfunc_need_attempt(void *arg, char *err, size_t errlen);

/* FUNCTION LOAD REPLACE this build's library, unless Redis holds a newer
 * one (then RFUNC_NEWER with err: an older seckillctl never takes functions
 * away from newer daemons). RFUNC_OK and *was (the version replaced, -1
 * none), or RFUNC_UNREACHABLE with err (the connection failed, Redis
 * refused, or this build's text has no version). Needs +function|load (the
 * admin user). */
enum rfunc_status rfunc_load(redisContext *rc, const struct rfunc_lib *lib, int *was, char *err,
                              size_t errlen);

/* rfunc_load on every primary of p, each one tried whatever the others
 * answered (a load mends what it reaches), each answer told to each (not
 * NULL). 0 when every primary took it, else -1. */
int rfunc_load_all(struct rp *p, const struct rfunc_lib *lib, rfunc_node_fn *each, void *arg);

/* What to say about f missing, for the log: the function, its library and
 * version, and the command that loads it. */
void rfunc_missing_text(const struct rfunc *f, char *buf, size_t len);

/* What went wrong with f's reply r on rc, for a message: the connection's
 * error (r NULL), rfunc_missing_text(), the error reply, or "unexpected
 * reply". Returns buf. */
const char *rfunc_error_text(const struct rfunc *f, const redisContext *rc, const redisReply *r, char *buf,
                             size_t len);

#endif
