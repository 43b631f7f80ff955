/* watch: a live view of a running sale, refreshed every interval, for the
 * operator on launch day (the way top is used).
 *
 * Per item: stock left and accepted buyers (Redis), pending orders
 * (reserved, not yet persisted: Redis), persisted and refused orders
 * (PostgreSQL), and the rate of each since the previous refresh; for an
 * item in buckets (bucket.h), the sums over its slots, and each slot's
 * units, buyers, pending orders and transfers given and received (their
 * records, xfer.h); for an
 * item shown that has a waiting room, the room as `seckillctl queue status`
 * reads it (qview.h: waiting, pre-queue, serving number, admissions
 * outstanding, the measured admission rate, admitted and abandoned a
 * second, paused); the consumer group's lag per partition (its committed
 * offsets against the topic's end); each producer's and consumer's
 * /healthz.
 *
 * It only reads: Redis GET/HGET/HLEN/SCARD/SMEMBERS/HGETALL/ZCARD, a PostgreSQL
 * session set read-only, a Kafka client that never joins the group or
 * commits, and HTTP GETs. A dependency that is down is shown as down and asked again on the
 * next refresh; watch itself keeps running until interrupted or --count
 * refreshes are done. On a terminal it redraws the screen; otherwise it
 * prints one line per refresh, so it can be logged. */
#ifndef SECKILL_WATCH_H
#define SECKILL_WATCH_H

#include "cfg.h"

/* seckillctl watch [--item ID]... [--interval MS] [--count N]
 *                  [--producer HOST:PORT]... [--consumer HOST:PORT]...
 * 0 when stopped by a signal or after N refreshes, 2 on a usage error. */
int watch_cmd(const struct cfg *c, int argc, char **argv);

#endif
