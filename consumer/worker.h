/* worker: the pool that turns orders (and buyers' cancels) into rows.
 *
 * Each worker is a thread with a FIFO inbox, its own lock client, Redis
 * connection and PostgreSQL connection. Dispatch hashes the user id, so one
 * user's orders stay on one worker in arrival order. A worker takes a batch,
 * locks its users in one round trip (ulocks.h), writes it in one transaction (sink, two
 * pipelined round trips), releases the locks, then clears the persisted
 * reservations in Redis (a round trip each, on two connections: every Redis
 * round trip goes through rpipe, which waits for its replies), and hands
 * the settled messages to the done queue.
 * What could not be settled (lock busy, stale fence, a dependency down)
 * stays at the head of its next batch, in order. */
#ifndef SECKILL_WORKER_H
#define SECKILL_WORKER_H

#include <stdbool.h>
#include <stddef.h>

#include "cfg.h"
#include "dlq.h"
#include "queue.h"

struct wk_pool;

/* A buyer's cancel in a batch applies after every order of the batch
 * (sink.h), so a message that must see a cancel before it commit first
 * waits for the next batch, at the head of it, in order:
 * - every later message of the cancel's user (user_held: that user cancelled
 *   earlier in the batch, or a message of theirs already waits), so one
 *   user's messages keep their order;
 * - every later order of the cancelled order's item (item_cancelled): it may
 *   stand on the unit the cancel gives back (a replay of the topic into a
 *   database that lost those rows).
 * Live, neither happens often: a unit or a buyer's place comes back to Redis
 * only after the cancel commits, so what stands on it reaches Kafka after.
 * True when the message waits; pure, for the unit tests. */
bool wk_must_wait(bool is_cancel, bool user_held, bool item_cancelled);

/* Start cfg->consumer.workers workers. Fails if any cannot connect. */
int wk_pool_open(const struct cfg *c, struct queue *done, struct dlq *dlq, struct wk_pool **out, char *err,
                 size_t errlen);
/* Queue m on its user's worker. */
void wk_dispatch(struct wk_pool *p, struct cmsg *m);
/* Finish what is queued, then exit (graceful stop). */
void wk_pool_finish(struct wk_pool *p);
/* Give up on what is queued and exit as soon as possible (drain timeout). */
void wk_pool_abandon(struct wk_pool *p);
/* Join the workers and free everything still queued. */
void wk_pool_close(struct wk_pool *p);

#endif
