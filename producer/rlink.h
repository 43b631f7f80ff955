/* rlink: the Redis of one producer thread (the reserving thread's, the
 * status thread's, the sold-out and winners threads'): its rpipe (rpipe.h),
 * opened at the first use and then kept, with this thread's view of whether
 * Redis works.
 *
 * A run that got nothing back (Redis down, a lost reply on one node) puts
 * the link down: rlink_ok() answers 0 until a backoff has passed, so a
 * request never waits on a dead Redis longer than it takes to refuse it.
 * Then the rpipe reconnects (it owns its connections) and prepare runs again
 * (checking the Redis functions: on a Cluster on every primary). prepare
 * also runs whenever rp_epoch() changes: a new connection, or a Cluster's
 * new slot map (a promoted replica has never been checked).
 *
 * On a Cluster a batch may fail on one shard while the others answer: that
 * is no reason to refuse the other shards' requests. The link stays up, the
 * failed commands' requests are refused (503), and the failure is said once
 * while it lasts (and counted in seckill_producer_redis_errors_total). Only
 * when no primary can be reached at all is the link down.
 *
 * The change of state is logged once each way, not per attempt, and every
 * failure is counted. A Redis that takes the connection and fails the first
 * command on it, again and again (a demoted primary answers every write
 * READONLY), is one failure too: said once, counted, and said over with the
 * count once a command works. Owned by one thread: no locking. */
#ifndef SECKILL_RLINK_H
#define SECKILL_RLINK_H

#include <stdint.h>

#include "cfg.h"
#include "log.h"
#include "rfunc.h"
#include "rpipe.h"

struct rlink {
    /* set by the owner */
    const struct cfg *cfg;
    const char *what;      /* who is refused meanwhile, for the log: "orders" */
    const char *meanwhile; /* instead of "<what> are refused (503)", when set */
    /* after each (re)connect and new slot map (the functions' check,
     * rfunc_check_all): RFUNC_OK, or another status with err, logged as the
     * link's reason for being down; may be NULL */
    enum rfunc_status (*prepare)(struct rp *p, void *arg, char *err, size_t errlen);
    void *arg;
    int report_up;         /* keep seckill_producer_redis_up (the reserving thread's link) */
    int count_trips;       /* count runs in seckill_producer_redis_roundtrips_total (the
                            * requests' links; the background checks' would hide whether a
                            * request cost a round trip) */
    /* state */
    struct rp *rp;         /* NULL until it could be opened */
    int down;
    int attempt;
    int64_t next_connect_ms;
    unsigned long epoch;    /* rp_epoch() that prepare last passed on */
    int prepared;
    int fresh;              /* connected, and no command seen to work on it yet */
    int announced;          /* "connected again" was said for this connection */
    struct log_repeat flap; /* connections that failed before anything worked */
    struct log_repeat shard; /* Cluster: some shards failed while others answered */
    int64_t shard_clean_ms;  /* since then, the first run that worked (0: none yet) */
};

/* A shard's failure is over once runs have worked this long without one:
 * batches that miss the failing shard work meanwhile, and would otherwise
 * end the failure and begin it again in the log, batch after batch. */
#define RLINK_SHARD_CLEAN_MS 2000

/* Open the link now and prepare it (a thread's start). RFUNC_OK; or
 * prepare's status, or RFUNC_UNREACHABLE (Redis could not be reached), with
 * err: the link is left closed, to be tried again by rlink_ok(). */
enum rfunc_status rlink_open(struct rlink *l, char *err, size_t errlen);
/* 1 with l->rp usable (opened and prepared if it had to be), 0 while Redis
 * is down or the backoff has not passed. */
int rlink_ok(struct rlink *l);
/* Run b on l->rp (rp_run), counting the round trip (count_trips). 0 when
 * every command got its answer. Else -1: on one node the link is down; on a
 * Cluster the failure is said once while it lasts, and the link is down only
 * when no primary can be reached. The caller reads each command's
 * rp_status(). */
int rlink_run(struct rlink *l, struct rp_batch *b);
/* One command (rp_call) the same way: its reply (the caller frees), or NULL. */
redisReply *rlink_call(struct rlink *l, const char *key, int argc, const char **argv);
/* A command got its answer (not an error reply): the connection works.
 * Ends a run of connections that failed at once. */
void rlink_worked(struct rlink *l);
/* The link failed: down until rlink_ok() reconnects and prepares it. */
void rlink_down(struct rlink *l, const char *why);
/* Let the next rlink_ok() try at once, whatever the backoff says. */
void rlink_retry_now(struct rlink *l);
void rlink_close(struct rlink *l);

#endif
