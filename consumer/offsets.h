/* offsets: the per-partition watermark.
 *
 * Workers settle messages out of order, but a Kafka offset is a promise about
 * everything below it. So each assigned partition keeps its in-flight offsets
 * in arrival order with a done flag; the watermark is the first offset not yet
 * settled, and only it may be stored. Owned by the poll thread alone. */
#ifndef SECKILL_OFFSETS_H
#define SECKILL_OFFSETS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct off_table;

int off_open(struct off_table **out);
void off_close(struct off_table *t);

/* Start tracking partition p afresh; returns its new epoch. Completions that
 * carry an older epoch belong to an earlier assignment and are ignored. */
int off_assign(struct off_table *t, int32_t p, uint32_t *epoch);
/* Forget p (revoked or lost); its in-flight messages no longer count. */
void off_revoke(struct off_table *t, int32_t p);
bool off_assigned(const struct off_table *t, int32_t p);

/* Record a message handed to the pipeline. Offsets arrive increasing per
 * partition. 0, or -1 (partition not assigned, or out of memory). */
int off_track(struct off_table *t, int32_t p, int64_t offset, uint32_t *epoch);
/* Mark it settled. 0, or 1 when it was stale (other epoch, unknown offset). */
int off_done(struct off_table *t, int32_t p, uint32_t epoch, int64_t offset);

/* When partition p's watermark moved past what was last reported, 1 and the
 * offset to store (the next one to consume); else 0. */
int off_advance(struct off_table *t, int32_t p, int64_t *next);
/* Messages of p still in flight. */
size_t off_inflight(const struct off_table *t, int32_t p);
/* Messages in flight over all partitions. */
size_t off_pending(const struct off_table *t);
/* The highest partition id seen + 1, to iterate. */
int32_t off_partitions(const struct off_table *t);

#endif
