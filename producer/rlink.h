/* rlink: the Redis connection of one producer thread (the reserving
 * thread's, the status thread's), reopened with backoff when it breaks.
 *
 * A broken connection is freed at once; the next rlink_ok() after the
 * backoff opens a new one and runs prepare (checking the Redis functions) on it, so a
 * request never waits on a dead Redis longer than it takes to refuse it.
 * The change of state is logged once each way, not per attempt, and every
 * failure is counted in seckill_producer_redis_errors_total. A Redis that
 * takes the connection and fails the first command on it, again and again (a
 * demoted primary answers every write READONLY), is one failure too: said
 * once, counted, and said over with the count once a command works. Owned by
 * one thread: no locking. */
#ifndef SECKILL_RLINK_H
#define SECKILL_RLINK_H

#include <hiredis/hiredis.h>
#include <stdint.h>

#include "cfg.h"
#include "log.h"

struct rlink {
    /* set by the owner */
    const struct cfg *cfg;
    const char *what;      /* who is refused meanwhile, for the log: "orders" */
    const char *meanwhile; /* instead of "<what> are refused (503)", when set */
    /* after each connect; 0, or -1 with err (logged as the link's reason for being down); may be NULL */
    int (*prepare)(redisContext *rc, void *arg, char *err, size_t errlen);
    void *arg;
    int report_up;         /* keep seckill_producer_redis_up (the reserving thread's link) */
    /* state */
    redisContext *rc;      /* NULL while down */
    int down;
    int attempt;
    int64_t next_connect_ms;
    int fresh;              /* connected, and no command seen to work on it yet */
    int announced;          /* "connected again" was said for this connection */
    struct log_repeat flap; /* connections that failed before anything worked */
};

/* 1 with l->rc usable (reopened and prepared if it had to be), 0 while
 * Redis is down or the backoff has not passed. */
int rlink_ok(struct rlink *l);
/* A command got its answer (not an error reply) on l->rc: the connection
 * works. Ends a run of connections that failed at once. */
void rlink_worked(struct rlink *l);
/* The connection failed (why may point into l->rc: it is logged before the
 * context is freed). */
void rlink_down(struct rlink *l, const char *why);
/* Let the next rlink_ok() try at once, whatever the backoff says. */
void rlink_retry_now(struct rlink *l);
void rlink_close(struct rlink *l);

#endif
