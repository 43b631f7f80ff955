/* qview: an item's waiting room (issue #58) as Redis holds it, read for
 * operators: `seckillctl queue status` prints it and `seckillctl watch`
 * shows it beside the sale, from this one reader, so both say the same.
 *
 * It only reads (HGETALL, SCARD, ZCARD, GET, HLEN), every key under the
 * item's hash tag (one slot). qview_add puts an item's QVIEW_CMDS commands
 * on a batch the caller fills and runs (so many items go in one round trip;
 * on a Redis Cluster each on its shard, rpipe.h), and qview_take reads
 * their replies back. The numbers are the room's as the last admission step
 * left them (producer/admitter.h: the queue hash's counters, the measured
 * rate, the lease), beside what Redis holds now (the pre-queue, the line,
 * the admissions outstanding and spent, the stock, the pending). No state:
 * any thread, with its own batch. */
#ifndef SECKILL_QVIEW_H
#define SECKILL_QVIEW_H

#include <stdint.h>

#include "rpipe.h"

/* The commands qview_add adds for one item. */
#define QVIEW_CMDS 8

struct qview {
    int64_t opens_ms;  /* when the room opens (the window's queue_opens_ms); 0: the item has no room */
    int64_t starts_ms; /* the sale's opening: the shuffle */
    int64_t opened_ms; /* when the seed was drawn; 0: not yet */
    char seed[160];    /* "" until drawn */
    int64_t joined_total;   /* joins that took a place */
    int64_t pre_now;        /* in the pre-queue now (until the opening moves them) */
    int64_t pre_total;      /* moved from the pre-queue by the opening */
    int64_t late_seq;       /* joined after the opening */
    int64_t line;           /* places in the line, called or not */
    int64_t serving;        /* the serving number: places called, admitted or passed over */
    int64_t admitted_total; /* of them admitted */
    int64_t passed_total;   /* of them passed over (their waiter had stopped asking) */
    int64_t waiting;        /* in the line, not called yet (as of the last step) */
    int64_t outstanding;    /* admissions neither spent nor run out */
    int64_t spent;          /* admissions spent and not past their end */
    int64_t stock;          /* units left; -1: no stock loaded */
    int64_t pending;        /* reservations not yet persisted */
    int64_t rate_milli;     /* admissions a second measured, x1000 (the waiters' ETAs' rate) */
    int64_t ceiling_per_s;  /* the item's own ceiling (seckillctl queue rate); 0: producer.queue_rate_per_s */
    int paused;             /* seckillctl queue pause */
    char lease[128];        /* the admitting producer, "owner|until_ms"; "" none yet */
};

/* Add the reads of item's room (under prefix) to b: 0, or -1 (a key does not
 * fit, out of memory). */
int qview_add(struct rp_batch *b, const char *prefix, int64_t item);
/* The replies of the QVIEW_CMDS commands from index first of run batch b
 * into *out: 0, or -1 when one is missing or an error (*out then holds what
 * was read, the rest 0). */
int qview_take(const struct rp_batch *b, int first, struct qview *out);

#endif
