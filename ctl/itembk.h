/* itembk: an item's buckets (issue #57, common/sale/bucket.h) as seckillctl
 * places, loads, keeps and shows them.
 *
 * The database holds the truth (items.bucket_salts, migration 019); Redis a
 * copy, in the field KEYS_WINDOW_BUCKETS of the item's own window hash, which
 * is how the other programs learn an item's buckets. Each bucket has a window
 * hash of its own, a copy of the item's (a buy in a bucket can only read keys
 * of the bucket's slot): seckillctl writes the item's window, then copies it
 * to every bucket (itembk_copy_window), after each change (item create, item
 * load, item pause and resume, reconcile --fix). Between the two a bucket's
 * copy is one change behind, for one round trip.
 *
 * A new sale's units all go to the item's own slot (the reserve); each
 * bucket is loaded empty, and the producer refills a buyer's bucket from the
 * reserve by a transfer (xfer.h) as it sells; a unit an order gives back
 * (expired, cancelled) goes to the reserve (consumer/outbox.h). item create
 * refuses a waiting room with buckets: its admission still lives in the
 * item's own slot only. */
#ifndef SECKILL_ITEMBK_H
#define SECKILL_ITEMBK_H

#include <stdbool.h>
#include <stdint.h>

#include "bucket.h"
#include "cfg.h"
#include "rpipe.h"

/* An item's buckets: k of them (1: none, today's layout), bucket b's salt
 * salts[b]. */
struct itembk {
    int k;
    int salts[BUCKET_MAX];
};

/* Choose the salts of k buckets on the primaries p knows now (bucket_place:
 * K buckets on K primaries wherever the Cluster has K). 0, or -1 after
 * printing why. */
int itembk_place(struct rp *p, const struct cfg *c, int64_t item, int k, struct itembk *out);

/* Whether a new sale may start: neither the item's own slot nor any of its
 * buckets holds buyers or reservations (orders may still be on their way),
 * all read in one round trip before anything is written, so that a refusal
 * leaves every slot as it was. 0, or -1 after saying which slot holds what.
 * (The loads below check again, each atomically with its own writes.) */
int itembk_idle(struct rp *p, const struct cfg *c, int64_t item, const struct itembk *bk);

/* Each bucket's keys made a new sale's: no stock, buyers, orders or window
 * (seckill_item_load with no units), before the item's own slot is loaded.
 * Refuses (-1, said) while a bucket holds buyers or reservations: orders may
 * still be on their way. 0 for none. */
int itembk_reset(struct rp *p, const struct cfg *c, int64_t item, const struct itembk *bk);

/* After the item's own window hash is written anew: it names the buckets
 * (or no longer does, for k 1), and each bucket gets its copy. Durable
 * (redis.min_replicas_ack). 0, or -1 after printing why. */
int itembk_publish(struct rp *p, const struct cfg *c, int64_t item, const struct itembk *bk);

/* Copy the item's window hash to each of the buckets it names (none: 0):
 * its fields set, the bucket's others removed. Durable. 0, or -1 after
 * printing why. */
int itembk_copy_window(struct rp *p, const struct cfg *c, int64_t item);

/* What Redis holds of the buckets the database names (db): whether the
 * item's window names the same salts (names: what it names, "" none), and
 * which buckets' windows are the item's (but for the field that names the
 * buckets). */
struct itembk_view {
    bool named;
    char names[BUCKET_MAX * 6];
    bool copy_ok[BUCKET_MAX];
    int stale_copies;
};

/* Read it: one round trip. 0, or -1 (said). */
int itembk_check(struct rp *p, const struct cfg *c, int64_t item, const struct itembk *db,
                 struct itembk_view *out);

/* item show's lines: the buckets the database names (db), each bucket's
 * primary, stock and buyers, the primaries they span, and whether Redis's
 * copy of the salts and windows agrees. 0, or -1 (said). */
int itembk_show(struct rp *p, const struct cfg *c, int64_t item, const struct itembk *db);

#endif
