/* bkmap: which of an item's slots holds a user's buy (issue #57: an item's
 * buckets, bucket.h), as the programs that sell and settle learn it.
 *
 * seckillctl names an item's buckets in its own window hash
 * (KEYS_WINDOW_BUCKETS, keys.h: "S0,S1,..."; absent: no buckets). A map
 * learns that field for the items it is asked about, all of them in one
 * pipelined round trip, and keeps it BKMAP_TTL_MS: K and the salts never change
 * while a sale runs, and the reservation function refuses a buy sent to the
 * item's own slot once the item has buckets (the producer then learns again
 * at once), so an answer kept a little too long sends a buy nowhere it could
 * sell. A field that does not parse is no buckets (said at debug level).
 * While Redis cannot be asked, what was learned before is kept.
 *
 * One thread's (an i64map inside). */
#ifndef SECKILL_BKMAP_H
#define SECKILL_BKMAP_H

#include <stdbool.h>
#include <stdint.h>

#include "bucket.h"
#include "rpipe.h"

/* How long an item's buckets, once learnt, are taken as they were: a
 * second, so each thread asks once a second per item it sees. */
#define BKMAP_TTL_MS 1000

struct bkmap;

/* An empty map. NULL: out of memory. */
struct bkmap *bkmap_new(void);
void bkmap_free(struct bkmap *m);

/* Learn the buckets of items[0 .. n-1] not known, or known longer than the
 * ttl, in one round trip (per shard) on p. 0, or -1 when an item could not
 * be asked (out of memory, its shard did not answer): it keeps what was
 * known, or stays unknown. */
int bkmap_learn(struct bkmap *m, struct rp *p, const char *prefix, const int64_t *items, size_t n);

/* The same for the items of n rows sorted by item, item_of(rows, i) row
 * i's (each item is asked once, a round trip per 512 items): for a
 * caller whose items are a field of its own rows. 0, or -1 as bkmap_learn. */
int bkmap_learn_rows(struct bkmap *m, struct rp *p, const char *prefix, const void *rows, size_t n,
                     int64_t (*item_of)(const void *rows, size_t i));

/* Forget item: the next bkmap_learn asks again (a buy was refused for
 * being sent to a slot the item no longer sells from). */
void bkmap_forget(struct bkmap *m, int64_t item);

/* The buckets item has, as last learned: true with *k (1: none) and
 * salts[0 .. *k-1] copied; false when it was never learned. */
bool bkmap_get(const struct bkmap *m, int64_t item, int *k, int salts[BUCKET_MAX]);

/* The salt of the slot that holds user's buy of item: its bucket's, or
 * BUCKET_HOME for an item without buckets or one never learned. */
int bkmap_salt(const struct bkmap *m, int64_t item, int64_t user);

#endif
