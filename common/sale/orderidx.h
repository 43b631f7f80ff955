/* orderidx: the order index, which leads a buyer who only has an order id
 * to the item whose keys hold the order's state (GET /api/v1/orders/ID).
 *
 * One hash per bucket of ORDERIDX_BUCKET consecutive order ids,
 * <prefix>:order:ix:{B} with B = ORDER / ORDERIDX_BUCKET (keys_order_bucket),
 * field ORDER -> "ITEM:USER". A producer hands out the ids of one block in a
 * row (order.h), so the orders one round trip marks published share a
 * bucket or two: one HSET and one PEXPIRE index them all, where a key per
 * order cost a SET with its own key and expiry each. A bucket lives
 * producer.status_ttl_s after its last write, so every entry lives at least
 * that long (and at most as much longer as its bucket took to fill).
 *
 * Before the buckets the index was a key per order, <prefix>:order:{ORDER}
 * (keys_order_legacy); status calls still read it for an order the buckets
 * do not know, so orders accepted before an upgrade keep their answer for as
 * long as those keys live (status_ttl_s).
 *
 * Pure command building into the caller's batch (rpipe.h): the caller runs
 * it and reads the replies (oidx_add says how many). Each bucket's two
 * commands route by its key, so on a Redis Cluster the buckets spread over
 * the shards. */
#ifndef SECKILL_ORDERIDX_H
#define SECKILL_ORDERIDX_H

#include <stddef.h>
#include <stdint.h>

#include "rpipe.h"

#define ORDERIDX_BUCKET 1024

struct oidx_entry {
    int64_t order_id, item_id, user_id;
};

/* Add the commands that index e[0..n) (sorted here by order id: the
 * caller's order is not kept) under prefix, each bucket kept ttl_s: an HSET
 * and a PEXPIRE per bucket. Returns the number of commands added, whose
 * replies the caller reads. Best effort: out of memory it stops early, and
 * the orders left are not indexed (their status by order id answers 404; by
 * item it still works). */
int oidx_add(struct rp_batch *b, const char *prefix, int ttl_s, struct oidx_entry *e, size_t n);

/* The field of order_id in its bucket (its decimal). Returns the length. */
int oidx_field(char *buf, size_t len, int64_t order_id);

#endif
