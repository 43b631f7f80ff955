#include "winners.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "i64map.h"
#include "pmetrics.h"

#define WIN_WAYS 4

/* One remembered winner; item_id 0: a free slot (ids are > 0). */
struct win_slot {
    int64_t item_id, user_id, asked_us;
};

/* An item's state, in the items table under its id. */
struct win_item {
    int known;       /* checked, and found: winners may be answered */
    int64_t buyers, given_back;
    int64_t valid_after_us; /* winners taught before this are not believed */
    int64_t resync_at_us;
    int64_t used_us; /* last recorded or asked about */
    int64_t checked_us; /* the last check's reply */
};

struct win {
    const struct cfg *cfg;
    pthread_mutex_t mu; /* guards the tables and the thread's flags */
    struct win_slot *slots;
    size_t slots_mask;
    struct i64map items; /* item id -> struct win_item, at most WIN_MAX_ITEMS */
    int64_t stored;
    void (*wake)(void *); /* the checker: a new item to check */
    void *wake_arg;
};

int win_new(const struct cfg *c, struct win **out, char *err, size_t errlen)
{
    size_t n = WIN_WAYS;
    struct win *w;
    *out = NULL;
    if (c->producer.winners_max == 0)
        return 0;
    while (n < (size_t)c->producer.winners_max)
        n <<= 1;
    if (!(w = calloc(1, sizeof(*w))))
        goto fail;
    /* Room for every item at once: adding one never allocates (item_add). */
    i64map_init(&w->items, 1, sizeof(struct win_item));
    if (!(w->slots = calloc(n, sizeof(*w->slots))) || i64map_reset(&w->items, WIN_MAX_ITEMS) != 0)
        goto fail;
    w->cfg = c;
    w->slots_mask = n - 1;
    pthread_mutex_init(&w->mu, NULL);
    *out = w;
    return 0;
fail:
    if (w)
        free(w->slots);
    free(w);
    snprintf(err, errlen, "out of memory");
    return -1;
}

/* --- the tables (w->mu held) --------------------------------------------- */

static struct win_item *item_find(struct win *w, int64_t item_id)
{
    return i64map_get(&w->items, &item_id);
}

/* A new item, not known until its first check. Past WIN_MAX_ITEMS every
 * item is forgotten: their winners, taught before the new first checks,
 * are believed no more. */
static struct win_item *item_add(struct win *w, int64_t item_id)
{
    if (w->items.n == WIN_MAX_ITEMS)
        i64map_clear(&w->items);
    /* Never NULL: win_new made room for WIN_MAX_ITEMS. Zeroed: not known. */
    return i64map_put(&w->items, &item_id);
}

static struct win_slot *slot_set(struct win *w, int64_t item_id, int64_t user_id)
{
    const int64_t key[2] = { user_id, item_id };
    size_t i = (size_t)i64map_hash(key, 2) & w->slots_mask;
    return &w->slots[i & ~(size_t)(WIN_WAYS - 1)];
}

static struct win_slot *slot_find(struct win *w, int64_t item_id, int64_t user_id)
{
    struct win_slot *set = slot_set(w, item_id, user_id);
    for (int i = 0; i < WIN_WAYS; i++)
        if (set[i].item_id == item_id && set[i].user_id == user_id)
            return &set[i];
    return NULL;
}

/* --- the public side ------------------------------------------------------ */

void win_record(struct win *w, int64_t item_id, int64_t user_id, int64_t asked_us)
{
    struct win_item *it;
    struct win_slot *s, *set;
    bool added = false;
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    if (!(it = item_find(w, item_id))) {
        it = item_add(w, item_id);
        added = true;
    }
    if (asked_us > it->used_us)
        it->used_us = asked_us;
    if (!(s = slot_find(w, item_id, user_id))) {
        /* A free slot, else the one taught longest ago. */
        set = slot_set(w, item_id, user_id);
        s = &set[0];
        for (int i = 1; i < WIN_WAYS && s->item_id; i++)
            if (!set[i].item_id || set[i].asked_us < s->asked_us)
                s = &set[i];
        if (!s->item_id) {
            w->stored++;
            PM_INC(winners);
        }
        *s = (struct win_slot){ item_id, user_id, 0 };
    }
    if (asked_us > s->asked_us)
        s->asked_us = asked_us;
    void (*wake)(void *) = added ? w->wake : NULL;
    void *arg = w->wake_arg;
    pthread_mutex_unlock(&w->mu);
    if (wake)
        wake(arg);
}

void win_set_wake(struct win *w, void (*wake)(void *), void *arg)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->wake = wake;
    w->wake_arg = arg;
    pthread_mutex_unlock(&w->mu);
}

void win_forget(struct win *w, int64_t item_id, int64_t user_id)
{
    struct win_slot *s;
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    if ((s = slot_find(w, item_id, user_id))) {
        *s = (struct win_slot){ 0 };
        w->stored--;
        PM_ADD(winners, -1);
    }
    pthread_mutex_unlock(&w->mu);
}

bool win_holds(struct win *w, int64_t item_id, int64_t user_id, int64_t now)
{
    bool r = false;
    struct win_item *it;
    if (!w)
        return false;
    pthread_mutex_lock(&w->mu);
    if ((it = item_find(w, item_id))) {
        it->used_us = now;
        /* Checks that stop coming (Redis unreachable from here, a slow
         * round trip) stop the answers too. */
        int64_t fresh_us = ((int64_t)CFG_GET(w->cfg->producer.soldout_refresh_ms) * 3 + 100) * 1000;
        const struct win_slot *s =
            it->known && now - it->checked_us <= fresh_us ? slot_find(w, item_id, user_id) : NULL;
        r = s && s->asked_us > it->valid_after_us;
    }
    pthread_mutex_unlock(&w->mu);
    return r;
}

void win_observe(struct win *w, int64_t item_id, const struct win_view *v, int64_t now)
{
    struct win_item *it;
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    if ((it = item_find(w, item_id))) {
        /* given_back only grows and buyers shrink only by a give-back: a
         * check that sees neither move saw no unit leave a winner. */
        bool moved = !it->known || !v->exists || v->given_back != it->given_back || v->buyers < it->buyers ||
                     now >= it->resync_at_us;
        if (moved) {
            if (it->known)
                PM_INC(winners_dropped);
            it->valid_after_us = now;
            it->resync_at_us = now + (int64_t)WIN_RESYNC_MS * 1000;
        }
        it->known = v->exists != 0;
        it->checked_us = now;
        it->buyers = v->buyers;
        it->given_back = v->given_back;
    }
    pthread_mutex_unlock(&w->mu);
}

size_t win_due(struct win *w, int64_t now, int64_t *ids, size_t max)
{
    size_t n = 0;
    if (!w)
        return 0;
    pthread_mutex_lock(&w->mu);
    struct win_item *it;
    const int64_t *id;
    for (size_t pos = 0; n < max && (it = i64map_next(&w->items, &pos, &id));) {
        if (now - it->used_us > (int64_t)WIN_IDLE_MS * 1000)
            it->known = 0; /* not checked any more: nothing answered from memory */
        else
            ids[n++] = *id;
    }
    pthread_mutex_unlock(&w->mu);
    return n;
}

void win_free(struct win *w)
{
    if (!w)
        return;
    PM_ADD(winners, -w->stored);
    pthread_mutex_destroy(&w->mu);
    i64map_free(&w->items);
    free(w->slots);
    free(w);
}
