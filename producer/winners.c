#include "winners.h"

#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon.h"
#include "keys.h"
#include "log.h"
#include "pmetrics.h"
#include "rfunc.h"
#include "rlink.h"
#include "rpipe.h"
#include "util.h"

#define WIN_WAYS 4

/* One remembered winner; item_id 0: a free slot (ids are > 0). */
struct win_slot {
    int64_t item_id, user_id, asked_us;
};

struct win_item {
    int64_t item_id; /* 0: a free slot */
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
    struct win_item items[2 * WIN_MAX_ITEMS]; /* open addressing, at most half full */
    size_t nitems;
    int64_t stored;

    /* the refresh thread */
    int started;
    pthread_t thread;
    pthread_cond_t cv;
    int stop, marked;
    struct rlink link;
    struct rfunc check;
    struct rp_batch batch;
    int64_t ids[WIN_MAX_ITEMS];
};

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x9E3779B97F4A7C15ull;
    return x ^ (x >> 29);
}

int win_new(const struct cfg *c, struct win **out, char *err, size_t errlen)
{
    size_t n = WIN_WAYS;
    struct win *w;
    *out = NULL;
    if (c->producer.winners_max == 0)
        return 0;
    while (n < (size_t)c->producer.winners_max)
        n <<= 1;
    if (!(w = calloc(1, sizeof(*w))) || !(w->slots = calloc(n, sizeof(*w->slots)))) {
        free(w);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    w->cfg = c;
    w->slots_mask = n - 1;
    pthread_mutex_init(&w->mu, NULL);
    *out = w;
    return 0;
}

/* --- the tables (w->mu held) --------------------------------------------- */

static struct win_item *item_find(struct win *w, int64_t item_id)
{
    size_t mask = 2 * WIN_MAX_ITEMS - 1;
    for (size_t i = mix((uint64_t)item_id) & mask; w->items[i].item_id; i = (i + 1) & mask)
        if (w->items[i].item_id == item_id)
            return &w->items[i];
    return NULL;
}

/* A new item, not known until its first check. Past WIN_MAX_ITEMS every
 * item is forgotten: their winners, taught before the new first checks,
 * are believed no more. */
static struct win_item *item_add(struct win *w, int64_t item_id)
{
    size_t mask = 2 * WIN_MAX_ITEMS - 1, i;
    if (w->nitems == WIN_MAX_ITEMS) {
        memset(w->items, 0, sizeof(w->items));
        w->nitems = 0;
    }
    for (i = mix((uint64_t)item_id) & mask; w->items[i].item_id; i = (i + 1) & mask)
        ;
    w->items[i] = (struct win_item){ .item_id = item_id };
    w->nitems++;
    w->marked = 1;
    if (w->started)
        pthread_cond_signal(&w->cv);
    return &w->items[i];
}

static struct win_slot *slot_set(struct win *w, int64_t item_id, int64_t user_id)
{
    size_t i = mix((uint64_t)user_id ^ mix((uint64_t)item_id)) & w->slots_mask;
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
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    if (!(it = item_find(w, item_id)))
        it = item_add(w, item_id);
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
    w->marked = 0;
    for (size_t i = 0; i < 2 * WIN_MAX_ITEMS && n < max; i++) {
        struct win_item *it = &w->items[i];
        if (!it->item_id)
            continue;
        if (now - it->used_us > (int64_t)WIN_IDLE_MS * 1000)
            it->known = 0; /* not checked any more: nothing answered from memory */
        else
            ids[n++] = it->item_id;
    }
    pthread_mutex_unlock(&w->mu);
    return n;
}

/* --- the refresh thread ------------------------------------------------ */

/* After each connect and new slot map: the producer's library, as
 * soldout.c checks it. */
static int check_functions(struct rp *p, void *arg, char *err, size_t errlen)
{
    (void)arg;
    return rlink_functions(p, RFUNC_LIB_PRODUCER, err, errlen);
}

/* seckill_soldout for item, routed by its keys: stock, buyers, orders,
 * window. */
static int add_check(struct win *w, int64_t item_id)
{
    static const enum keys_item_part parts[4] = { KEYS_ITEM_STOCK, KEYS_ITEM_BUYERS, KEYS_ITEM_ORDERS,
                                                  KEYS_ITEM_WINDOW };
    char k[4][KEYS_MAX];
    const char *argv[4] = { k[0], k[1], k[2], k[3] };
    for (int i = 0; i < 4; i++)
        if (keys_item(k[i], KEYS_MAX, w->cfg->redis.key_prefix, item_id, parts[i]) < 0)
            return -1;
    return rp_fcall(&w->batch, &w->check, 4, 0, argv, NULL) < 0 ? -1 : 0;
}

/* Command i's reply: 1 a view (into *v), 0 anything else (not sent, lost,
 * the function missing, an error). */
static int view_of(const struct win *w, int i, struct win_view *v)
{
    const redisReply *r = rp_reply(&w->batch, i);
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 6;
    for (size_t k = 0; ok && k < 6; k++)
        ok = r->element[k]->type == REDIS_REPLY_INTEGER;
    if (ok)
        *v = (struct win_view){ r->element[0]->integer, r->element[2]->integer, r->element[3]->integer };
    return ok;
}

/* Check every item due, in one pipelined round trip. An item whose check
 * fails (Redis down for this producer, not for the others) is believed no
 * longer than win_holds' freshness allows. */
static void refresh(struct win *w)
{
    size_t n = win_due(w, now_us(), w->ids, WIN_MAX_ITEMS), sent = 0;
    if (!n || !rlink_ok(&w->link))
        return;
    rp_batch_reset(&w->batch);
    for (; sent < n; sent++)
        if (add_check(w, w->ids[sent]) != 0)
            break;
    (void)rlink_run(&w->link, &w->batch);
    /* The replies' arrival: later than Redis ran the checks. */
    int64_t at = now_us();
    for (size_t i = 0; i < sent; i++) {
        struct win_view v;
        if (view_of(w, (int)i, &v)) {
            rlink_worked(&w->link);
            win_observe(w, w->ids[i], &v, at);
        }
    }
    if (w->batch.missing) {
        /* Redis lost the function: the link stays down until it is loaded
         * again (its prepare checks the library at each reconnection). */
        char why[512];
        rfunc_missing_text(&w->check, why, sizeof(why));
        rlink_down(&w->link, why);
    }
}

static void *win_main(void *arg)
{
    struct win *w = arg;
    daemon_signals_block_thread();
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        pthread_mutex_unlock(&w->mu);
        refresh(w);
        pthread_mutex_lock(&w->mu);
        if (!w->stop && !w->marked) {
            struct timespec ts = util_deadline_ts(CFG_GET(w->cfg->producer.soldout_refresh_ms));
            pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        }
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int win_start(struct win *w, char *err, size_t errlen)
{
    if (!w)
        return 0;
    w->check = (struct rfunc)RFUNC_INIT("seckill_soldout", RFUNC_LIB_PRODUCER);
    w->link = (struct rlink){ .cfg = w->cfg,
                              .what = "winners checks",
                              .meanwhile = "repeated presses of winners go to Redis",
                              .prepare = check_functions,
                              .arg = w };
    if (util_cond_init_mono(&w->cv) != 0) {
        snprintf(err, errlen, "cannot make a condition variable");
        return -1;
    }
    if (pthread_create(&w->thread, NULL, win_main, w) != 0) {
        snprintf(err, errlen, "cannot start the winners thread");
        pthread_cond_destroy(&w->cv);
        return -1;
    }
    pthread_mutex_lock(&w->mu);
    w->started = 1;
    pthread_mutex_unlock(&w->mu);
    return 0;
}

void win_free(struct win *w)
{
    if (!w)
        return;
    if (w->started) {
        pthread_mutex_lock(&w->mu);
        w->stop = 1;
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL);
        rlink_close(&w->link);
        rp_batch_free(&w->batch);
        pthread_cond_destroy(&w->cv);
    }
    PM_ADD(winners, -w->stored);
    pthread_mutex_destroy(&w->mu);
    free(w->slots);
    free(w);
}
