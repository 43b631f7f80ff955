/* kmeta: a topic's partitions and offset range, asked of the brokers with a
 * deadline that holds.
 *
 * rd_kafka_query_watermark_offsets in Debian's librdkafka 2.0.2 can wait
 * forever while a partition has no leader (librdkafka #2588, fixed in
 * 2.3.0), which would hang an operator's command during a broker failover.
 * A ListOffsets request for the "earliest" (-2) and "latest" (-1) times
 * answers the same question and keeps its timeout.
 *
 * The questions are asked of any client, or of one opened for nothing else
 * (kmeta_open). */
#ifndef SECKILL_KMETA_H
#define SECKILL_KMETA_H

#include <librdkafka/rdkafka.h>
#include <stddef.h>
#include <stdint.h>

#include "cfg.h"

/* A client only for questions to the brokers (metadata, offsets, a group's
 * committed offsets): it never produces and never joins a group. group NULL:
 * a producer handle with kafka.producer_properties (a producer needs no
 * group id); else a consumer handle with kafka.consumer_properties and that
 * group.id, auto-commit off: without a subscribe it never joins, so the
 * group's members are not disturbed. rd_kafka_destroy() it; NULL with err. */
rd_kafka_t *kmeta_open(const struct cfg *c, const char *group, char *err, size_t errlen);

/* The deadline of each question below when a command (rebuild) or a replay
 * asks it before it can start: long enough for the brokers to elect a new
 * leader after a failover, short enough that an operator hears of a cluster
 * that is gone. */
#define KMETA_TIMEOUT_MS 10000

/* The number of partitions of topic. 0 and *n, or -1 with err. */
int kmeta_partitions(rd_kafka_t *rk, const char *topic, int timeout_ms, int32_t *n, char *err, size_t errlen);

/* Earliest and next offsets (the low and high watermarks) of partitions
 * 0..n-1 into lo[] and hi[] (either may be NULL). 0, or -1 with err. */
int kmeta_range(rd_kafka_t *rk, const char *topic, int32_t n, int timeout_ms, int64_t *lo, int64_t *hi,
                char *err, size_t errlen);

/* The group's committed offsets (rk opened by kmeta_open with that group)
 * of partitions 0..n-1 into at[]: -1 where the group has committed nothing
 * (RD_KAFKA_OFFSET_INVALID). Reads only: nothing is committed or joined.
 * 0, or -1 with err. */
int kmeta_committed(rd_kafka_t *rk, const char *topic, int32_t n, int timeout_ms, int64_t *at, char *err,
                    size_t errlen);

/* Offsets of the first messages stamped at or after ts (ms since the epoch)
 * in partitions 0..n-1 into at[]: -1 (RD_KAFKA_OFFSET_END) where no message
 * is that late. 0, or -1 with err. */
int kmeta_offsets_at(rd_kafka_t *rk, const char *topic, int32_t n, int timeout_ms, int64_t ts, int64_t *at,
                     char *err, size_t errlen);

#endif
