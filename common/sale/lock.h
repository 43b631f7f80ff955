/* lock: a Redis lease lock that is safe to build on.
 *
 *  - acquired in one atomic step (a Lua script: no SETNX-then-EXPIRE window);
 *  - owned by a random 128-bit token per client, so no other process or host
 *    can release or renew it by accident;
 *  - reentrant: the same client may take it again, and must release it as
 *    many times; an acquisition whose reply was lost is sent again with the
 *    same request id (the client's token and a counter of its own) and is
 *    not counted twice;
 *  - renewed by a watchdog thread every ttl/3 while held (monotonic clock);
 *    the watchdog sleeps until its earliest renewal and a new lease wakes it
 *    only when due before that; renewal stops at release, and a lease that
 *    could not be renewed in time is reported lost, so the holder can
 *    abandon its work;
 *  - fenced: every acquisition returns a number larger than any returned
 *    before for that name. The protected resource (PostgreSQL here) stores
 *    the largest fence it has seen and refuses writes that carry a smaller one,
 *    which is what makes a holder paused past its lease harmless.
 *
 * Locks live in KEYS_LOCK_GROUPS groups (keys.h), each one Redis hash with a
 * field per lock whose value carries the lease's end: a batch costs one
 * script call per group, all pipelined in one round trip (on a Redis
 * Cluster, one per primary that holds some of the batch's groups, rpipe.h),
 * each call a fixed handful of Redis commands whatever its number of locks,
 * and every call touches one Redis Cluster slot. On a Cluster the groups
 * spread over the primaries; each lock's exclusion, fence and lease live on
 * its group's primary alone, so all of the above holds per lock there too.
 *
 * A lock_client and the locks it returns belong to one thread; only the
 * watchdog runs beside it, with a Redis connection (an rpipe) of its own. */
#ifndef SECKILL_LOCK_H
#define SECKILL_LOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cfg.h"
#include "keys.h"

enum lock_status {
    LOCK_OK = 0,        /* acquired / released */
    LOCK_BUSY = 1,      /* held by another owner until the wait ran out */
    LOCK_NOT_HELD = 2,  /* release of a lock this client does not hold: nothing was deleted */
    LOCK_ERROR = -1,    /* Redis unreachable or a bad name; nothing is held */
};

struct lock;
struct lock_client;

/* Counters for metrics; totals since the client was opened. */
struct lock_counters {
    uint64_t acquired;      /* successful acquisitions (re-entries included) */
    uint64_t contended;     /* acquisitions that had to wait for another owner */
    uint64_t timeouts;      /* gave up waiting (LOCK_BUSY) */
    uint64_t wait_ms;       /* time spent waiting in acquisitions */
    uint64_t hold_ms;       /* time locks were held, counted at final release */
    uint64_t renewals;      /* leases renewed by the watchdog */
    uint64_t lost;          /* leases lost while held */
    uint64_t not_held;      /* releases of locks that were no longer ours */
    uint64_t errors;        /* Redis errors */
    uint64_t calls;         /* script calls sent: one per group of locks a batch spans */
};

/* Open a client with its own token, Redis connection and watchdog.
 * Settings come from cfg's redis and lock sections; cfg must outlive it. */
int lock_client_open(const struct cfg *cfg, struct lock_client **out, char *err, size_t errlen);
/* Stop the watchdog and close. Locks still held are not released: their
 * leases simply run out. */
void lock_client_close(struct lock_client *lc);
void lock_client_counters(const struct lock_client *lc, struct lock_counters *out);

/* Acquire NAME, waiting up to wait_ms (0: try once) with jittered
 * exponential backoff. ttl_ms <= 0 means the configured lease.
 * LOCK_OK and *out, LOCK_BUSY or LOCK_ERROR. Re-entering a lock this client
 * holds returns the same handle with one more hold and the same fence. */
int lock_acquire(struct lock_client *lc, const char *name, int ttl_ms, int wait_ms, struct lock **out);

/* Acquire n names in one round trip per attempt (one script call per group
 * of names), waiting up to wait_ms for the busy ones. status[i] is LOCK_OK
 * (out[i] set), LOCK_BUSY or LOCK_ERROR. Returns how many were acquired. */
size_t lock_acquire_many(struct lock_client *lc, const char *const *names, size_t n, int wait_ms,
                         struct lock **out, int *status);

/* Release one hold. The handle is freed when its last hold is released (or
 * when the lock turned out not to be ours any more). LOCK_OK, LOCK_NOT_HELD
 * or LOCK_ERROR (the lease then runs out on its own). */
int lock_release(struct lock_client *lc, struct lock *l);
/* Release n locks in one round trip (one script call per group); status[i]
 * as for lock_release. */
void lock_release_many(struct lock_client *lc, struct lock **locks, size_t n, int *status);

int64_t lock_fence(const struct lock *l);
int lock_holds(const struct lock *l);
/* True once the lease can no longer be trusted: renewal failed or came too
 * late. Check before every protected write; the fence check is the backstop. */
bool lock_lost(const struct lock *l);

/* What Redis says about NAME, for `seckillctl lock show`. */
struct lock_info {
    bool held;
    char owner[64];
    int64_t holds;
    int64_t fence;      /* fence of the current holder */
    int64_t ttl_ms;     /* remaining lease, -2 when free */
    int64_t last_fence; /* last fence handed out in the name's group, 0 if unknown */
    char key[KEYS_MAX]; /* the group's hash: the lock is its field named NAME */
};
int lock_inspect(const struct cfg *cfg, const char *name, struct lock_info *out, char *err, size_t errlen);

/* Lock names: 1..200 printable characters, no braces (a brace would make
 * Redis Cluster read a hash tag where none is meant). */
bool lock_name_valid(const char *name);

#endif
