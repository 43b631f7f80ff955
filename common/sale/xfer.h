/* xfer: units moved between two of one item's slots (issue #57: the item's
 * own slot, which holds the units not yet handed to a bucket, and its
 * buckets, bucket.h), on one Redis or across a Redis Cluster's shards.
 *
 * A transfer has an id and two halves, each one function call on its own
 * shard that moves the stock and records the id in the same step
 * (seckill_xfer_out, seckill_xfer_in: producer/lua/seckill_producer.lua):
 * - the giving half takes up to `want` units the source holds above `keep`
 *   and records "destination:units" under the id in the source's :xout;
 * - the receiving half adds them and records the id in the destination's
 *   :xin, unless it is there already.
 * So a half run again changes nothing, and between the halves the units are
 * counted once: by the source's record, as in flight (the escrow rule: a
 * side gives only what it holds, and a unit in transit belongs to no side's
 * stock). Either half may be lost to a crash, a lost reply or a failover:
 * - the giving half alone (a crash after it): xfer_finish applies the other
 *   half from the source's record, at any time, as often as it likes, once
 *   enough replicas hold that record (it writes the record again and WAITs:
 *   seckill_xfer_hold; WAIT only covers the caller's own writes);
 * - the receiving half lost to a failover: the same;
 * - the giving half lost to a failover after the receiving half ran would
 *   double the units, so the giving half is durable (rpipe.h: WAIT for
 *   redis.min_replicas_ack replicas) and the receiving half is sent only
 *   once enough replicas hold it.
 * The records stay for the sale's life (a half retried late still finds
 * them); item create, a new sale, forgets them.
 *
 * Threads: the rp's (rpipe.h). */
#ifndef SECKILL_XFER_H
#define SECKILL_XFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rpipe.h"

/* A transfer id: 32 hex digits of randomness, unique over the sale. */
#define XFER_ID_MAX 33
int xfer_new_id(char id[XFER_ID_MAX]);

struct xfer {
    int64_t item;
    int from, to; /* salts (bucket.h); BUCKET_HOME: the item's own slot */
    char id[XFER_ID_MAX];
    int64_t want; /* at most this many units (>= 1) */
    int64_t keep; /* the source keeps this many (>= 0) */
};

/* Both halves of x, in order. 0 and *moved (0: the source had nothing
 * above keep, and nothing was recorded); -1 with err when a half failed or
 * too few replicas hold the giving half: the transfer is then finished by
 * xfer_finish (or by this call again, with the same id). */
int xfer_move(struct rp *p, const char *prefix, const struct xfer *x, int64_t *moved, char *err,
              size_t errlen);

/* What the source slot's record says. */
struct xfer_tally {
    int64_t given;     /* transfers the source gave */
    int64_t units;     /* their units */
    int64_t in_flight; /* units given whose receiving half is missing (before finishing) */
    int64_t finished;  /* receiving halves this call applied */
};

/* Look up every transfer the item's slot `from` gave and, with apply, run
 * the receiving half of each that is missing. 0 and *out, or -1 with err
 * (what was done is in *out; a record that is no "SALT:UNITS" is an error
 * too, and is left alone). */
int xfer_finish(struct rp *p, const char *prefix, int64_t item, int from, bool apply, struct xfer_tally *out,
                char *err, size_t errlen);

#endif
