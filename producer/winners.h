/* winners: the buyers this producer knows hold a unit, so that a winner who
 * presses again - and a bot that presses for them - is answered 409 on the
 * HTTP thread without a Redis round trip.
 *
 * Redis stays the judge. A buyer is remembered only after Redis said so
 * (seckill_reserve: reserved and Kafka acknowledged, or duplicate), and the
 * memory is never believed past what can be checked: a unit can be given
 * back (seckill_restore after Kafka refused an order, on any producer), an item
 * reloaded or lost. seckill_restore counts give-backs per item, as soldout.h
 * uses; a thread of its own reads, each producer.soldout_refresh_ms and in
 * one pipelined round trip, seckill_soldout for every item whose winners were
 * recorded or asked about in the last WIN_IDLE_MS: whether the item
 * exists, its buyers and its given-back count. When the count moved, the
 * buyers shrank, the item is gone, or WIN_RESYNC_MS passed (the operator's
 * repairs change buyers without a give-back), every winner of the item
 * recorded so far is forgotten.
 *
 * Why that is enough: a winner is answered from memory only if the request
 * that taught it arrived (asked_us, before it was sent to Redis) after the
 * reply of the item's last check that found nothing moved. Its unit was
 * Redis's at that request, so any give-back of it comes later than that
 * check, and the next check sees the count move. So a stale 409 lasts at
 * most one refresh period and a round trip; a give-back by this producer
 * itself (win_forget) ends it at once. An item not yet checked, or whose
 * check failed (Redis down), answers nothing from memory.
 *
 * Bounded: producer.winners_max buyers (0: off), 4-way sets where the
 * oldest entry makes room; WIN_MAX_ITEMS items, all forgotten at once
 * beyond it.
 *
 * Times are CLOCK_MONOTONIC microseconds. Every function may be called from
 * any thread (the HTTP thread asks, the reserving thread records). */
#ifndef SECKILL_WINNERS_H
#define SECKILL_WINNERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cfg.h"

#define WIN_MAX_ITEMS 4096
#define WIN_IDLE_MS 60000
#define WIN_RESYNC_MS 10000

struct win;

/* The table alone (no thread: win_observe is the caller's). With
 * producer.winners_max = 0, NULL in *out: every function takes NULL and
 * remembers nothing. 0, or -1 with err set. */
int win_new(const struct cfg *c, struct win **out, char *err, size_t errlen);
/* Start the refresh thread (it connects to Redis itself, with backoff). w
 * may be NULL. 0, or -1 with err set. */
int win_start(struct win *w, char *err, size_t errlen);
/* Stop the thread, if started, and free. */
void win_free(struct win *w);

/* Redis said user holds a unit of item, answering a request that arrived
 * at asked_us. */
void win_record(struct win *w, int64_t item_id, int64_t user_id, int64_t asked_us);
/* This producer gave user's unit of item back, or may have. */
void win_forget(struct win *w, int64_t item_id, int64_t user_id);
/* Whether to answer user 409 for item without asking Redis; now_us keeps
 * the item checked while asked about. */
bool win_holds(struct win *w, int64_t item_id, int64_t user_id, int64_t now_us);

/* What a check of an item found (seckill_soldout's reply). */
struct win_view {
    int64_t exists, buyers, given_back;
};
/* Apply one check of item whose reply arrived at now_us (the refresh
 * thread does; tests call it with their own clock). */
void win_observe(struct win *w, int64_t item_id, const struct win_view *v, int64_t now_us);
/* Items that are due a check at now_us: up to max ids into ids, how many.
 * Items idle past WIN_IDLE_MS are no longer checked and answer nothing. */
size_t win_due(struct win *w, int64_t now_us, int64_t *ids, size_t max);

#endif
