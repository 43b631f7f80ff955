/* sweep: re-publish reservations Kafka never acknowledged.
 *
 * A reservation stays "unpublished" when the producer crashed between the
 * script and the delivery report, or the report was ambiguous. After an age
 * the sweeper claims it (seckill_restore then refuses to give its unit back) and
 * publishes it again. Publishing twice is safe: the consumer's insert is
 * idempotent on order_id. With redis.min_replicas_ack, only what that many
 * replicas hold is published (WAIT after the claim), as the producer's own
 * 202. For an item in buckets it also finishes the transfers between its
 * slots that a producer left half done (xfer.h), whose units are on sale
 * nowhere until then. Runs inside the producer and as `seckillctl sweep`. */
#ifndef SECKILL_SWEEP_H
#define SECKILL_SWEEP_H

#include <stddef.h>
#include <stdint.h>

#include "cfg.h"
#include "publish.h"
#include "rpipe.h"

struct sweep_stats {
    int64_t items;        /* items with a sale loaded */
    int64_t pending;      /* reservations not yet persisted */
    int64_t unpublished;  /* of which not yet acknowledged by Kafka */
    int64_t claimed;      /* older than the age: claimed for re-publishing */
    int64_t republished;  /* acknowledged by Kafka this pass */
    int64_t failed;       /* claimed but not acknowledged (retried after the age) */
    int64_t undecodable;  /* of which not an order message: left in place, never sent */
    /* Items in buckets (issue #57, bucket.h): every bucket's slot is swept
     * as the item's own is. */
    int64_t buckets;      /* buckets swept beside the items' own slots */
    int64_t crowded;      /* items whose buckets share a primary while another could take one */
    int64_t bad_buckets;  /* items whose window names buckets seckillctl never writes */
    int64_t xfer_finished; /* transfers between an item's slots found half done and finished (xfer.h) */
};

/* One pass over every item (each item's commands go to the primary of its
 * slot: on a Redis Cluster the pass visits every shard that holds an item;
 * an item in buckets, each bucket's slot after the item's own),
 * waiting for the delivery reports of what it re-publishes (at most
 * message.timeout.ms). 0, or -1 with err set (Redis failed; what was done is
 * in *out). */
int sweep_once(const struct cfg *c, struct rp *rp, struct pub *p, int64_t age_ms,
               struct sweep_stats *out, char *err, size_t errlen);

#endif
