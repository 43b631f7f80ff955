/* bucket: where a hot item's buyers and units live when its stock is split
 * over several Redis slots (issue #57, docs/design.md "One item over many
 * shards").
 *
 * An item's sale lives on one hash slot, so its reservations are capped by
 * one Redis core. Split into K buckets, each with its own stock, buyers,
 * reservations and buyers' statuses under a hash tag of its own, a buy is
 * still one function call on one shard, and K shards share the crowd.
 *
 * - A user's bucket is bucket_of(user, K): a fixed hash of the user id. K
 *   never changes during a sale: moving a user to another bucket would let
 *   them buy once in each. Changing the hash moves every user: never within
 *   a sale.
 * - Bucket b's keys carry the tag {item:ID:S} (keys_item_at), S its salt.
 *   bucket_place chooses the salts so that the buckets spread over the
 *   primaries as evenly as they can (K buckets on K primaries when the
 *   Cluster has K); bucket_spread says, after a reshard, how many primaries
 *   they sit on now. The item's own tag {item:ID} (salt BUCKET_HOME) holds
 *   the units not yet handed to a bucket and those that come back.
 *
 * Pure functions: which primary serves a key is the caller's question
 * (rp_node_of_key on a real Redis, a table in the tests). */
#ifndef SECKILL_BUCKET_H
#define SECKILL_BUCKET_H

#include <stddef.h>
#include <stdint.h>

/* At most this many buckets an item (a few per primary is all that helps). */
#define BUCKET_MAX 16
/* The salt of the item's own slot: today's keys, {item:ID}. */
#define BUCKET_HOME (-1)
/* bucket_place tries salts below this; a Cluster's primaries each own a
 * range of slots, and a few dozen tries find each of a few primaries. */
#define BUCKET_SALT_TRIES 4096

/* The bucket, 0 .. k-1, of user_id in an item of k buckets (k >= 1). */
int bucket_of(int64_t user_id, int k);

/* The primary that serves key (0 .. nodes-1), or -1 when none does. */
typedef int (*bucket_node_fn)(void *arg, const char *key);

/* Choose salts[0 .. k-1] for an item of k buckets under prefix on nodes
 * primaries: each bucket in turn takes the lowest unused salt whose slot is
 * on a primary with the fewest buckets so far, so the choice is the same
 * wherever it is made with the same slot map. 0, or -1 when k is out of
 * range or a key does not fit (keys.h). */
int bucket_place(const char *prefix, int64_t item, int k, int nodes, bucket_node_fn node_of, void *arg,
                 int salts[BUCKET_MAX]);

/* How many distinct primaries the k buckets sit on now (-1: a key does not
 * fit, or a bucket's slot has no primary). Fewer than the smaller of k and
 * the primaries means two buckets share one that another could take: a
 * reshard moved them. */
int bucket_spread(const char *prefix, int64_t item, int k, const int salts[], bucket_node_fn node_of,
                  void *arg);

/* An item's salts as text, "S0,S1,...,Sk-1" in bucket order: the copy the
 * item's window hash keeps (KEYS_WINDOW_BUCKETS, keys.h) and the database's
 * (items.bucket_salts, migration 019). "" is no buckets (k = 1).
 * bucket_parse: 0 with salts[0 .. *k-1] and *k (1 for ""), or -1 for
 * anything else: a count of 1 or above BUCKET_MAX, a salt out of
 * [0, BUCKET_SALT_TRIES), one twice, a stray character.
 * bucket_format: the length, or -1 when it does not fit len. */
int bucket_parse(const char *text, int salts[BUCKET_MAX], int *k);
int bucket_format(char *buf, size_t len, const int salts[], int k);

#endif
