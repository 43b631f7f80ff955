/* kmeta: a topic's partitions and offset range, asked of the brokers with a
 * deadline that holds.
 *
 * rd_kafka_query_watermark_offsets in Debian's librdkafka 2.0.2 can wait
 * forever while a partition has no leader (librdkafka #2588, fixed in
 * 2.3.0), which would hang an operator's command during a broker failover.
 * A ListOffsets request for the "earliest" (-2) and "latest" (-1) times
 * answers the same question and keeps its timeout. */
#ifndef SECKILL_KMETA_H
#define SECKILL_KMETA_H

#include <librdkafka/rdkafka.h>
#include <stddef.h>
#include <stdint.h>

/* The number of partitions of topic. 0 and *n, or -1 with err. */
int kmeta_partitions(rd_kafka_t *rk, const char *topic, int timeout_ms, int32_t *n, char *err, size_t errlen);

/* Earliest and next offsets (the low and high watermarks) of partitions
 * 0..n-1 into lo[] and hi[] (either may be NULL). 0, or -1 with err. */
int kmeta_range(rd_kafka_t *rk, const char *topic, int32_t n, int timeout_ms, int64_t *lo, int64_t *hi, char *err,
                size_t errlen);

#endif
