/* admitter: the waiting room's clock (issue #58), on a thread of its own:
 * the openings and the admission of every item with a waiting room.
 *
 * Every second it lists the items with a room (the items registry, each
 * one's window hash: queue_opens_ms). At an item's starts_ms it opens the
 * room: it draws a seed from the kernel's CSPRNG (getrandom), offers it
 * with seckill_queue_open, which stores the first seed offered (so every
 * producer places alike), and moves the pre-queue into the line in chunks
 * of ADT_OPEN_CHUNK members per call, so Redis never stalls long; each
 * producer logs the seed stored, once (seckillctl queue audit --item ID
 * recomputes the order from it).
 *
 * Every ADT_TICK_MS it takes one admission step per item
 * (seckill_queue_admit, all items in one pipelined round trip): the
 * producer holding the item's lease (ADT_LEASE_MS in Redis, renewed by each
 * step; another producer takes over once it lapses) admits up to its rate's
 * share of the time passed, never beyond the units left plus
 * producer.queue_margin_pct outstanding; the others learn the item's state
 * for their metrics. In the same round trip it writes back the asks the
 * producer's copy of the lines answered, and reads what the copy needs
 * beside each step; once an opening has placed an item's line, it reads
 * the line into the copy (qcopy.h, qfeed.h). The rate is admctl.h's loop
 * under the ceiling (producer.queue_rate_per_s, or the item's own:
 * seckillctl queue rate), stepped every ACTL_PERIOD_MS on this producer's
 * accepted buys' p99 and the item's backlog. The rate measured (admissions
 * a second, averaged over about ADT_RATE_WINDOW_MS) is stored with each
 * step for the waiters' ETAs.
 *
 * What it writes is not waited for by replicas (redis.min_replicas_ack): a
 * failover that loses an admission makes its token "lapsed" and the next
 * steps admit again; nothing is sold without a reservation, which is.
 *
 * From its own view of each item it also counts, for the alerts, the items
 * that stand stalled (waiters, units, an open sale, and a serving number
 * that has not moved for longer than an admission's life) and those whose
 * rate it holds at the loop's floor (docs/operations.md).
 *
 * Owned by the main thread (start, stop); the thread touches only its own
 * state and the metrics. */
#ifndef SECKILL_ADMITTER_H
#define SECKILL_ADMITTER_H

#include "cfg.h"
#include "qcopy.h"

#define ADT_TICK_MS 100
#define ADT_LEASE_MS 2000
#define ADT_OPEN_CHUNK 5000
#define ADT_RATE_WINDOW_MS 5000
/* Items with a waiting room watched at most. */
#define ADT_ITEMS_MAX 4096

struct adt;

/* Start the thread (Redis may come later); it keeps v, the copy the HTTP
 * thread answers asks from (qcopy.h, through qfeed.h), in step. 0, or -1
 * with err set. */
int adt_start(const struct cfg *c, struct qcopy *v, struct adt **out, char *err, size_t errlen);
void adt_stop(struct adt *a);

#endif
