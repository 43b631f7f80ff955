/* queuecmd: `seckillctl queue`, an item's waiting room (issue #58) for
 * operators and auditors:
 *
 *   queue status --item ID            the room as Redis holds it (qview.h,
 *                                     which seckillctl watch shows too)
 *   queue rate --item ID --per-s N    the item's ceiling on admissions a
 *                                     second, live (0: producer.queue_rate_per_s)
 *   queue pause|resume --item ID      stop or restart admission, live
 *   queue audit --item ID [--quiet]   the line's order recomputed from the
 *                                     stored seed and checked against Redis's;
 *                                     the order printed (one "RANK USER" a line)
 *
 * The producers read the rate and the pause with every admission step
 * (producer/admitter.h): within ADT_TICK_MS. Exit 0, 1 on a failure or an
 * audit that does not hold, 2 on a usage error. */
#ifndef SECKILL_QUEUECMD_H
#define SECKILL_QUEUECMD_H

#include <stdint.h>

#include "cfg.h"

int queuecmd(const struct cfg *c, int argc, char **argv);

/* The place the opening gives user under seed, as seckill_queue_open
 * computes it: the first 13 hex digits of SHA-1(seed ':' user), as an
 * integer (below 2^52). -1 when OpenSSL fails. */
int64_t queue_shuffled_score(const char *seed, const char *user);

#endif
