/* orderid: order ids without a round trip per request.
 *
 * Ids come from blocks of 2^ORDER_ID_SEQ_BITS (order.h). The reserving thread
 * hands them out one by one; when half a block is used it asks for the next
 * one, which the housekeeping thread takes from PostgreSQL ahead of need. */
#ifndef SECKILL_ORDERID_H
#define SECKILL_ORDERID_H

#include <stdatomic.h>
#include <stdint.h>

#include "cfg.h"

struct oid_gen {
    int64_t block;            /* current block; owned by the reserving thread */
    int64_t seq;              /* next sequence number in it */
    _Atomic int64_t spare;    /* the next block, 0 until fetched */
    _Atomic int want_spare;   /* set by the reserving thread, served by housekeeping */
    /* A copy of block for other threads (the id_block gauge): block itself
     * is the reserving thread's, read without synchronisation on each id. */
    _Atomic int64_t shown_block;
};

/* Take a fresh block from PostgreSQL (a committed INSERT; see
 * order_id_blocks). 0, or -1 with err set. */
int oid_take_block(const struct cfg *c, int64_t *block, char *err, size_t errlen);

/* Start a generator on block (from oid_take_block). */
void oid_init(struct oid_gen *g, int64_t block);

/* The next id, or -1 when the block is used up and the spare has not come:
 * the caller answers "unavailable" rather than invent an id. */
int64_t oid_next(struct oid_gen *g);

/* The block ids are being handed out from, for another thread than the
 * reserving one. */
int64_t oid_block(struct oid_gen *g);

/* Housekeeping: fetch the spare block if one was asked for. 0 when nothing
 * was needed or it was fetched; -1 with err set when PostgreSQL failed. */
int oid_refill(struct oid_gen *g, const struct cfg *c, char *err, size_t errlen);

#endif
