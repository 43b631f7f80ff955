/* winners: the buyers this producer knows hold a unit, so that a winner who
 * presses again - and a bot that presses for them - is answered 409 on the
 * HTTP thread without a Redis round trip.
 *
 * Redis stays the judge. A buyer is remembered only after Redis said so
 * (seckill_reserve: reserved and Kafka acknowledged, or duplicate), and the
 * memory is never believed past what can be checked: a unit can be given
 * back (seckill_restore after Kafka refused an order, on any producer), an item
 * reloaded or lost. seckill_restore counts give-backs per item, as soldout.h
 * uses; the sold-out thread (soldout.h) reads, each
 * producer.soldout_refresh_ms and in the same pipelined round trip as its
 * own checks, seckill_soldout for every item whose winners were recorded or
 * asked about in the last WIN_IDLE_MS (win_due), and hands each reply here
 * (win_observe): whether the item exists, its buyers and its given-back
 * count. An item both views want is checked once a pass, not twice: in a
 * sale of many items these checks are most of Redis's calls. When the count
 * moved, the buyers shrank, the item is gone, or WIN_RESYNC_MS passed (the operator's
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

/* The table (the checks are the sold-out thread's: soldout.h). With
 * producer.winners_max = 0, NULL in *out: every function takes NULL and
 * remembers nothing. 0, or -1 with err set. */
int win_new(const struct cfg *c, struct win **out, char *err, size_t errlen);
/* Who checks the items: wake(arg) is called, outside the table's lock, when
 * a new item is recorded, so that its first check need not wait a period.
 * A call under way is not waited for: clear it (NULL) only once no thread
 * records winners any more (producer/main.c stops the reserving thread
 * first). w may be NULL. */
void win_set_wake(struct win *w, void (*wake)(void *), void *arg);
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
