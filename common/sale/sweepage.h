/* sweepage: how old an unpublished reservation must be before a sweep may
 * claim it, the same for every caller (the producer's sweeper, `seckillctl
 * sweep`, `reconcile` and its --fix, and `item rebuild`'s delivery window).
 *
 * Never younger than twice the producer's delivery timeout plus 2 s: a
 * reservation still waiting for its delivery report is not stale, and
 * claiming it would stop its producer from giving the unit back on a certain
 * failure. librdkafka scans for timed-out messages about once a second, and
 * the idempotent producer may hold them while it recovers, so the report can
 * come well after message.timeout.ms.
 *
 * The delivery timeout is read from the configuration the way pub_open()
 * builds its producer (its default, then kafka.properties, then
 * kafka.producer_properties, aliases such as delivery.timeout.ms included),
 * from a librdkafka conf alone: no producer is opened to learn it. */
#ifndef SECKILL_SWEEPAGE_H
#define SECKILL_SWEEPAGE_H

#include <stdint.h>

#include "cfg.h"

/* 2 x message.timeout.ms + 2000. A property librdkafka refuses counts as
 * unset (PUB_DEFAULT_TIMEOUT_MS): pub_open() refuses it too, so no sweep
 * publishes with it anyway. */
int64_t sweep_min_age_ms(const struct cfg *c);

/* producer.sweep_age_ms, raised to sweep_min_age_ms(). */
int64_t sweep_age_ms(const struct cfg *c);

#endif
