/* pipeline: the poll thread of seckill-consumer.
 *
 * Owns the orders topic's consumer loop (kloop.h: the Kafka consumer, the
 * watermark table, the pause state, the dead letters) and the worker pool:
 * it decodes each message, sends invalid ones to the dead-letter producer
 * and valid ones to the worker pool, takes settled messages back from the
 * done queue, moves the per-partition watermarks and stores offsets only up
 * to them. It never blocks on a worker: with consumer.max_pending messages in
 * flight it takes no more from librdkafka (which stops fetching once its
 * own queue is full, and throws nothing away), and while a worker cannot
 * reach PostgreSQL or Redis it pauses fetching. Only the thread that calls
 * pipe_open and pipe_poll may touch it (the rebalance callback runs inside
 * pipe_poll). */
#ifndef SECKILL_PIPELINE_H
#define SECKILL_PIPELINE_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

#include "cfg.h"

struct pipe;

/* Connect everything (workers: PostgreSQL, Redis, locks; the dead-letter
 * producer; the consumer) and subscribe. 0 or -1 with err. */
int pipe_open(struct cfg *c, struct pipe **out, char *err, size_t errlen);
/* One turn of the poll loop, waiting up to timeout_ms for messages.
 * 0, or -1 after a fatal Kafka error (then drain and close). */
int pipe_poll(struct pipe *p, int timeout_ms);
/* Graceful stop: stop fetching, let the workers finish what is in flight for
 * up to timeout_ms, store and commit the offsets of what was settled. Gives
 * up at once (-1) when *stop_signals reaches 2. 0 when nothing was left
 * behind, 1 when the deadline abandoned some work. */
int pipe_drain(struct pipe *p, int timeout_ms, volatile sig_atomic_t *stop_signals);
/* Leave the group, close the consumer, flush the dead-letter producer, free. */
void pipe_close(struct pipe *p);

bool pipe_fatal(const struct pipe *p);
/* For /healthz: 1 when Kafka, PostgreSQL and Redis are all usable. */
int pipe_healthy(const struct pipe *p);

#endif
