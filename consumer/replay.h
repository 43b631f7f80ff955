/* replay: read the orders topic again, from a point in time or from the
 * beginning, and apply every order through the same worker pool as the live
 * consumer (per-user lock, fence, one transaction, ON CONFLICT DO NOTHING),
 * and every buyer's cancel as the live consumer does too (worker.h, sink.h):
 * a cancel applied before changes nothing now (its order is no longer
 * pending). The summary counts the cancels in columns of their own, after
 * the orders' (cancelled, cancel-noop).
 *
 * It assigns itself every partition instead of joining the consumer group,
 * so the live consumers are never rebalanced, and it never commits an
 * offset, so their progress is never moved. It stops at the end offsets the
 * topic had when the replay began: orders that arrive later are the live
 * consumers' business. Replaying any number of times changes nothing that a
 * first replay did not. */
#ifndef SECKILL_REPLAY_H
#define SECKILL_REPLAY_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "cfg.h"

struct replay_opts {
    int64_t from_ms;      /* first message timestamp to replay; -1 from the beginning */
    int64_t to_ms;        /* replay messages stamped before this; -1 up to the end */
    int progress_ms;      /* a progress line on stderr this often; 0 never */
};

/* Run the replay to completion, print the per-partition summary on out.
 * Returns the exit status: 0 when every message in range was settled, 1 on
 * an error or when *stop_signals interrupted it (what was settled stays). */
int replay_run(struct cfg *c, const struct replay_opts *o, volatile sig_atomic_t *stop_signals, FILE *out);

#endif
