/* ulocks: a batch of users' locks, taken in one round trip and given back in
 * one.
 *
 * The workers (orders, cancels) and the payments thread write a user's rows
 * under that user's lock, "user:ID" (keys_user_lock), and its fence, so that
 * a buyer's order, payment and cancel never run out of order. Both take the
 * locks of every user of a batch at once (lock_acquire_many: one round trip,
 * one per primary on a Redis Cluster, waiting up to lock.wait_ms for the busy
 * ones), keep each user's status and lock while the batch is written, and
 * give back the ones held at once (lock_release_many); a lease a failed
 * release leaves runs out on its own. What to do with a user not locked (try
 * again soon, back off) stays the caller's: ul_lock says how many were
 * taken, busy, or failed.
 *
 * The lock client is the batch's: ul_connect opens it once (a Redis that
 * cannot be reached is the caller's to wait out: it calls again), ul_free
 * closes it. Its counters go to the consumer's metrics (cm.lock[slot], the
 * caller's slot among the consumer's lock clients) at ul_publish.
 *
 * A struct ul_batch is the caller's (embedded) and belongs to one thread, as
 * its lock client does (lock.h). */
#ifndef SECKILL_ULOCKS_H
#define SECKILL_ULOCKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cfg.h"
#include "keys.h"
#include "lock.h"

/* How a ul_lock went: users locked, busy elsewhere past lock.wait_ms, and
 * not locked for a failure (Redis, or no lock client). */
struct ul_tally {
    size_t got, busy, errors;
};

struct ul_batch {
    const struct cfg *cfg;
    struct lock_client *lc; /* NULL until ul_connect */
    int slot;               /* cm.lock's */
    size_t cap, n;          /* room; users of the batch under way */
    char (*names)[KEYS_USER_LOCK_MAX];
    const char **namep;
    struct lock **locks; /* locks[i] set where status[i] is LOCK_OK */
    int *status;         /* each user's lock.h status */
};

/* Room for batches of up to cap users, counters into cm.lock[slot] (a slot
 * out of range publishes nothing); no lock client yet. 0, or -1 out of
 * memory (ul_free frees what was had). */
int ul_init(struct ul_batch *b, const struct cfg *c, size_t cap, int slot);
/* Close the lock client (the leases still held run out) and free. */
void ul_free(struct ul_batch *b);
/* Open the lock client unless it is open. 0, or -1 with err. */
int ul_connect(struct ul_batch *b, char *err, size_t errlen);

/* Lock users[0..n) (distinct, n <= cap) in one round trip; user i's status
 * is then ul_held(b, i). Without a lock client (ul_connect failed) none is
 * locked, each an error. *t says how it went; returns t->got. */
size_t ul_lock(struct ul_batch *b, const int64_t *users, size_t n, struct ul_tally *t);
/* Whether user i of the batch is locked, and its lock's fence (held only). */
bool ul_held(const struct ul_batch *b, size_t i);
int64_t ul_fence(const struct ul_batch *b, size_t i);
/* True when a lease of the batch can no longer be trusted (lock_lost): a
 * write under it must not commit. */
bool ul_any_lost(const struct ul_batch *b);
/* Give back the locks held, in one round trip; the batch is empty then. */
void ul_release(struct ul_batch *b);
/* The lock client's counters into cm.lock[slot]. */
void ul_publish(const struct ul_batch *b);

/* The bookkeeping, pure (for the unit tests): the tally of n statuses, and
 * the locks of status LOCK_OK moved to the front of locks, in order (how
 * many). */
void ul_count(const int *status, size_t n, struct ul_tally *t);
size_t ul_held_first(struct lock **locks, const int *status, size_t n);

#endif
