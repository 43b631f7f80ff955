/* qfeed: keeps this producer's copy of its waiting rooms (qcopy.h) in step
 * with Redis, on the admitter's thread (admitter.h), in the admitter's
 * round trips:
 *   - ahead of each admission step, the asks the copy answered, written as
 *     seckill_queue writes them (one HSET per item's queue:seen, in pages of
 *     QF_SEEN_PAGE), so the step that passes over the absent sees them; a
 *     batch that failed keeps them for the next;
 *   - beside each step, the queue hash's fields the copy needs (the last
 *     place called, the rate told to waiters, the seed);
 *   - once the opening has placed an item's pre-queue, its line, read in
 *     pages of QF_LINE_PAGE places, at most QF_LINE_PAGES a step, so Redis
 *     never works on one read for long; the copy gets it once whole.
 * The producer's Redis user may read the line and write queue:seen
 * (scripts/stack.d/redis.sh); nothing here changes what a waiter holds. */
#ifndef SECKILL_QFEED_H
#define SECKILL_QFEED_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

#include "qcopy.h"
#include "rlink.h"
#include "rpipe.h"

#define QF_SEEN_PAGE 1000
#define QF_LINE_PAGE 20000
#define QF_LINE_PAGES 2

struct qfeed {
    struct qcopy *v;
    const char *prefix;
    struct qc_seen *seen; /* taken from the copy, not yet written */
    size_t nseen, cap;
    int first, n; /* their HSETs in the batch being run */
    int whole;    /* every record is in them */
    char *txt;         /* a page's numbers as text */
    const char **argv; /* a page's HSET */
};

/* A line being read, for one opening. */
struct qf_read {
    struct qc_line *line;
    uint64_t seed_id;
};

/* 0, or -1 out of memory. */
int qf_init(struct qfeed *f, struct qcopy *v, const char *prefix);
void qf_free(struct qfeed *f);

/* Add to b the HSETs of the asks answered since the last batch that
 * worked. 0, or -1 (nothing added; they wait). */
int qf_seen_add(struct qfeed *f, struct rp_batch *b);
/* b ran: the asks whose HSETs worked are done with; the others wait. */
void qf_seen_ran(struct qfeed *f, const struct rp_batch *b);

/* Add to b the HMGET of item's queue hash that qf_state reads. 0 or -1. */
int qf_meta_add(const struct qfeed *f, struct rp_batch *b, int64_t item);
/* From that reply into s: the place last called, the rate, the seed's id
 * (0 when none). */
void qf_meta(const redisReply *r, struct qc_state *s);

/* The copy of item has its state s (qc_step); then, when the opening has
 * placed its pre-queue and the copy lacks it, read the next pages of the
 * line into rd (owned by the caller's item: qf_read_drop when it goes). */
void qf_step(struct qfeed *f, struct rlink *l, struct qf_read *rd, int64_t item, const struct qc_state *s,
             int64_t now_mono_ms);
void qf_read_drop(struct qf_read *rd);

#endif
