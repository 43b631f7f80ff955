#include "soldout.h"

#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bgthread.h"
#include "bkmap.h"
#include "daemon.h"
#include "funclibs.h"
#include "i64map.h"
#include "keys.h"
#include "log.h"
#include "pmetrics.h"
#include "rlink.h"
#include "rpipe.h"
#include "rfunc.h"
#include "util.h"

/* Items ever marked, at most: entries are reused, never removed, so the
 * table only grows with items that really sold out. */
#define SO_MAX_ITEMS 65536
/* A copied buyers set is copied again this often even when nothing seemed
 * to move: the operator's repairs (`seckillctl reconcile --fix`, `item
 * rebuild`) change buyers without a give-back. */
#define SO_RESYNC_MS 10000
/* How long before a window's end (by this host's clock) the item's
 * requests go to Redis again, until Redis says the sale has ended: Redis's
 * clock decides the end, and a host's may lag it by this much. */
#define SO_END_MARGIN_MS 2000
/* Members per SSCAN call: one call stays well under a millisecond of Redis
 * time, so copying a large set never stalls the sale. */
#define SO_SCAN_COUNT "1000"

enum so_state {
    SO_NONE,    /* not known sold out: ask Redis */
    SO_SUSPECT, /* Redis said sold out; buyers not copied yet: ask Redis */
    SO_KNOWN,   /* sold out with its buyers copied: answer 410 here */
};

struct so_item {
    int64_t item_id;
    enum so_state state;
    /* what seckill_soldout said when the buyers were copied */
    int64_t buyers, given_back;
    int64_t resync_at_ms;
    int64_t ends_ms; /* the sale window's end (wall clock), 0: none */
    int ended;       /* Redis said the window is past: answer "ended" */
    /* SO_KNOWN only: the buyers' user ids, a set. Never changed once
     * published: a new copy replaces it. */
    struct i64map *holders;
    int too_many;         /* logged that its buyers exceed the limit */
    size_t check;         /* its check's place in the pass being built */
};

/* seckill_soldout's answer for one item. */
struct so_view {
    int64_t exists, stock, buyers, given_back, ends_ms, ended;
};

struct so {
    const struct cfg *cfg;
    struct rlink link;
    struct rfunc check;
    struct win *w; /* the winners table: its items are checked in the same pass */
    struct bkmap *bk; /* each checked item's buckets (this thread's) */
    int64_t wids[WIN_MAX_ITEMS]; /* the pass's winners items (this thread's) */
    size_t wcheck[WIN_MAX_ITEMS]; /* and the place of each one's check */

    struct bgthread t; /* its mutex (t.mu) guards everything below */
    int marked; /* a mark since the last pass: do not wait for the period */
    struct so_item *items;
    size_t n, cap;
    struct i64map index; /* item -> its position in items (a size_t) */
};

/* A set of buyers with room for want of them. NULL when out of memory. */
static struct i64map *holders_new(size_t want)
{
    struct i64map *h = malloc(sizeof(*h));
    if (!h)
        return NULL;
    i64map_init(h, 1, 0);
    if (i64map_reset(h, want) != 0) {
        free(h);
        return NULL;
    }
    return h;
}

static void holders_free(struct i64map *h)
{
    if (h)
        i64map_free(h);
    free(h);
}

/* --- the table (s->t.mu held) ------------------------------------------ */

static struct so_item *find(const struct so *s, int64_t item_id)
{
    const size_t *at = i64map_get(&s->index, &item_id);
    return at ? &s->items[*at] : NULL;
}

static struct so_item *add(struct so *s, int64_t item_id)
{
    size_t *at;
    if (s->n == SO_MAX_ITEMS)
        return NULL;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        struct so_item *v = realloc(s->items, cap * sizeof(*v));
        if (!v)
            return NULL;
        s->items = v;
        s->cap = cap;
    }
    /* (i64map keeps the index at most half full: short probes on the HTTP thread) */
    if (!(at = i64map_put(&s->index, &item_id)))
        return NULL;
    *at = s->n;
    s->items[s->n] = (struct so_item){ .item_id = item_id };
    return &s->items[s->n++];
}

/* Forget what is known of it; the caller frees *old after unlocking. */
static void forget(struct so_item *it, struct i64map **old)
{
    if (it->state == SO_KNOWN)
        PM_ADD(soldout_items, -1);
    *old = it->holders;
    it->holders = NULL;
    it->state = SO_NONE;
}

/* --- the public side ---------------------------------------------------- */

enum so_answer so_sold_out(struct so *s, int64_t item_id, int64_t user_id)
{
    enum so_answer r = SO_ASK_REDIS;
    if (!s)
        return r;
    pthread_mutex_lock(&s->t.mu);
    struct so_item *it = find(s, item_id);
    if (it && it->state == SO_KNOWN && !i64map_has(it->holders, &user_id)) {
        if (it->ended)
            r = SO_ENDED;
        else if (!it->ends_ms || util_wall_ms() < it->ends_ms - SO_END_MARGIN_MS)
            r = SO_SOLD_OUT;
        /* else: near the end, only Redis can tell sold out from ended */
    }
    pthread_mutex_unlock(&s->t.mu);
    return r;
}

void so_mark(struct so *s, int64_t item_id)
{
    if (!s || CFG_GET(s->cfg->producer.soldout_max_buyers) == 0)
        return;
    pthread_mutex_lock(&s->t.mu);
    struct so_item *it = find(s, item_id);
    if (!it && !(it = add(s, item_id))) {
        pthread_mutex_unlock(&s->t.mu);
        return; /* its requests keep going to Redis: slower, not wrong */
    }
    if (it->state == SO_NONE) {
        it->state = SO_SUSPECT;
        s->marked = 1;
        bgt_wake(&s->t);
    }
    pthread_mutex_unlock(&s->t.mu);
}

/* --- talking to Redis (the refresh thread) ----------------------------- */

/* After each connect and new slot map: the producer's library on every
 * primary (check_functions in reserve.c says why the link stays down
 * without it). */
static enum rfunc_status check_functions(struct rp *p, void *arg, char *err, size_t errlen)
{
    (void)arg;
    return rfunc_check_all(p, &funclib_producer, NULL, NULL, err, errlen);
}

/* The slots a check of item reads (docs/design.md "One item over many
 * shards"): its own, then each of its buckets'; an item without buckets has
 * its own alone. How many, or 0 when its buckets were never learnt (Redis
 * did not answer): such an item is not checked this pass. */
static int item_slots(const struct so *s, int64_t item_id, int salts[BUCKET_MAX + 1])
{
    int k;
    salts[0] = BUCKET_HOME;
    if (!bkmap_get(s->bk, item_id, &k, salts + 1))
        return 0;
    return k > 1 ? k + 1 : 1;
}

/* seckill_soldout's keys in one slot: stock, buyers, orders, window. */
static int item_keys(const struct so *s, int64_t item_id, int salt, char k[4][KEYS_MAX])
{
    static const enum keys_item_part parts[4] = { KEYS_ITEM_STOCK, KEYS_ITEM_BUYERS, KEYS_ITEM_ORDERS,
                                                  KEYS_ITEM_WINDOW };
    for (int i = 0; i < 4; i++)
        if (keys_item_at(k[i], KEYS_MAX, s->cfg->redis.key_prefix, item_id, salt, parts[i]) < 0)
            return -1;
    return 0;
}

/* Add item's check to b: seckill_soldout in each of its slots (each routed
 * by its keys). How many calls, 0 when it has none this pass, or -1. */
static int add_check(struct so *s, struct rp_batch *b, int64_t item_id)
{
    int salts[BUCKET_MAX + 1], n = item_slots(s, item_id, salts);
    for (int i = 0; i < n; i++) {
        char k[4][KEYS_MAX];
        const char *argv[4] = { k[0], k[1], k[2], k[3] };
        if (item_keys(s, item_id, salts[i], k) != 0 || rp_fcall(b, s->check.name, 4, 0, argv, NULL) < 0)
            return -1;
    }
    return n;
}

/* seckill_soldout's reply into *v. 0, or -1 for anything else (the
 * function missing included: the item waits for the next pass). */
static int parse_view(const redisReply *r, struct so_view *v)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 6)
        return -1;
    for (size_t i = 0; i < 6; i++)
        if (r->element[i]->type != REDIS_REPLY_INTEGER)
            return -1;
    *v = (struct so_view){ r->element[0]->integer, r->element[1]->integer, r->element[2]->integer,
                           r->element[3]->integer, r->element[4]->integer, r->element[5]->integer };
    return 0;
}

/* An item's view from its slots' replies, commands first .. first+n-1 of
 * b, into *v: the sums of stock, buyers and units given back over the
 * slots (a purchase anywhere moves the buyers' sum, a give-back anywhere
 * the given-back sum: the reasoning of soldout.h and winners.h holds for
 * the sums), present only if every slot is, ended only once every slot's
 * Redis says so. 1 when every reply is a view, 0 when one is not (not
 * sent, lost, the function missing, an error) or n is 0. */
static int view_of(struct so *s, const struct rp_batch *b, int first, int n, struct so_view *v)
{
    for (int i = 0; i < n; i++) {
        struct so_view one;
        if (parse_view(rp_reply(b, first + i), &one) != 0)
            return 0;
        if (i == 0) {
            *v = one;
            continue;
        }
        v->exists = v->exists && one.exists;
        v->stock += one.stock;
        v->buyers += one.buyers;
        v->given_back += one.given_back;
        v->ends_ms = one.ends_ms > v->ends_ms ? one.ends_ms : v->ends_ms;
        v->ended = v->ended && one.ended;
    }
    if (n > 0)
        rlink_worked(&s->link);
    return n > 0;
}

/* Redis lost the function: the link stays down until it is loaded again
 * (its prepare checks the library at each reconnection). */
static void script_lost(struct so *s)
{
    char why[512];
    rfunc_missing_text(&s->check, why, sizeof(why));
    rlink_down(&s->link, why);
}

static int check_one(struct so *s, int64_t item_id, struct so_view *v)
{
    struct rp_batch b;
    int got = 0;
    rp_batch_init(&b);
    int n = add_check(s, &b, item_id);
    if (n > 0) {
        (void)rlink_run(&s->link, &b);
        got = view_of(s, &b, 0, n, v);
        if (b.missing)
            script_lost(s);
    }
    rp_batch_free(&b);
    return got == 1 ? 0 : -1;
}

/* Add the members of the buyers set `key` to h (SSCAN: Redis never blocks
 * on a large set). 0, or -1 (Redis failed, out of memory). */
static int scan_buyers(struct so *s, const char *key, struct i64map *h)
{
    char cursor[32] = "0";
    do {
        const char *argv[] = { "SSCAN", key, cursor, "COUNT", SO_SCAN_COUNT };
        redisReply *r = rlink_call(&s->link, key, 5, argv);
        if (!r)
            return -1;
        int ok = r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                 r->element[0]->type == REDIS_REPLY_STRING && r->element[0]->len < sizeof(cursor) &&
                 r->element[1]->type == REDIS_REPLY_ARRAY;
        for (size_t i = 0; ok && i < r->element[1]->elements; i++) {
            const redisReply *m = r->element[1]->element[i];
            int64_t u;
            /* Members are user ids; anything else cannot be a buyer who
             * asks: such a member simply never matches. */
            if (m->type == REDIS_REPLY_STRING && util_parse_i64(m->str, 1, INT64_MAX, &u) == 0 &&
                !i64map_put(h, &u))
                ok = 0; /* out of memory (the set grew past what seckill_soldout said) */
        }
        if (ok)
            memcpy(cursor, r->element[0]->str, r->element[0]->len + 1);
        freeReplyObject(r);
        if (!ok)
            return -1;
    } while (strcmp(cursor, "0") != 0);
    return 0;
}

/* Copy the buyers of item, those of every slot it has (a buyer holds a
 * unit in one only), then check again: the copy is kept only if nothing
 * moved while it was taken. A new set, or NULL (Redis failed, or the item
 * changed meanwhile). */
static struct i64map *copy_buyers(struct so *s, int64_t item_id, const struct so_view *before)
{
    int salts[BUCKET_MAX + 1], n = item_slots(s, item_id, salts);
    struct i64map *h;
    struct so_view after;
    if (n == 0 || !(h = holders_new((size_t)before->buyers)))
        return NULL;
    for (int i = 0; i < n; i++) {
        char k[4][KEYS_MAX];
        if (item_keys(s, item_id, salts[i], k) != 0 || scan_buyers(s, k[1], h) != 0)
            goto fail;
    }
    if (check_one(s, item_id, &after) != 0 || after.exists != before->exists || after.stock > 0 ||
        after.buyers != before->buyers || after.given_back != before->given_back)
        goto fail;
    PM_INC(soldout_copies);
    return h;
fail:
    holders_free(h);
    return NULL;
}

/* What a pass looks at: an item and what was known of it. */
struct so_look {
    int64_t item_id;
    enum so_state state;
    int64_t buyers, given_back, resync_at_ms;
};

/* Apply one item's check. A copy is made outside the lock. */
static void settle_item(struct so *s, const struct so_look *l, const struct so_view *v, int64_t max_buyers)
{
    struct i64map *copy = NULL, *old = NULL;
    struct so_item *it;
    int back = !v->exists || v->stock > 0;
    int too_many = !back && v->buyers > max_buyers;
    int stale = l->state == SO_SUSPECT || v->buyers != l->buyers || v->given_back != l->given_back ||
                util_mono_ms() >= l->resync_at_ms;
    if (!back && !too_many && stale && !(copy = copy_buyers(s, l->item_id, v)))
        return; /* try again next pass; its requests go to Redis meanwhile if it was suspect */
    pthread_mutex_lock(&s->t.mu);
    /* Only this thread forgets items: it is still there, and not SO_NONE. */
    it = find(s, l->item_id);
    if (it) {
        it->ends_ms = v->ends_ms;
        it->ended = (int)v->ended;
    }
    if (it && (back || too_many)) {
        if (too_many && !it->too_many)
            log_notice("sold out: item %" PRId64 " has %" PRId64
                       " buyers, more than producer.soldout_max_buyers "
                       "(%" PRId64 "): its sold-out requests go to Redis",
                       l->item_id, v->buyers, max_buyers);
        it->too_many = too_many;
        forget(it, &old);
        if (too_many)
            it->state = SO_SUSPECT; /* Redis said sold out: look again next pass */
    } else if (it && copy) {
        if (it->state != SO_KNOWN)
            PM_INC(soldout_items);
        old = it->holders;
        it->holders = copy;
        it->state = SO_KNOWN;
        it->buyers = v->buyers;
        it->given_back = v->given_back;
        it->resync_at_ms = util_mono_ms() + SO_RESYNC_MS;
        copy = NULL;
    }
    pthread_mutex_unlock(&s->t.mu);
    holders_free(copy);
    holders_free(old);
}

/* One pass: the items to check, each once, and where each check's reply
 * is. The sold-out items come first (look[i] is check i), then the winners'
 * items that are not among them; s->wcheck says each winners item's check. */
struct pass {
    int64_t max_buyers;
    struct so_look *look;
    size_t nlook, nwin, n;
    int64_t *ids; /* check i is of item ids[i] */
    struct so_view *views;
    char *ok; /* views[i] came */
    int *first, *calls; /* check i is calls[i] commands of b from first[i] */
    struct rp_batch b;
};

/* The sold-out items to look at (s->t.mu held): look[] and ids[], each item
 * noting its check's place. How many. */
static size_t collect_soldout(struct so *s, struct pass *p)
{
    size_t n = 0;
    if (p->max_buyers == 0) {
        /* Switched off by a reload: every request goes to Redis again. */
        for (size_t i = 0; i < s->n; i++) {
            struct i64map *old = NULL;
            forget(&s->items[i], &old);
            holders_free(old);
        }
        return 0;
    }
    for (size_t i = 0; i < s->n; i++) {
        struct so_item *it = &s->items[i];
        if (it->state == SO_NONE)
            continue;
        it->check = n;
        p->ids[n] = it->item_id;
        p->look[n++] = (struct so_look){ it->item_id, it->state, it->buyers, it->given_back,
                                         it->resync_at_ms };
    }
    return n;
}

/* Gather the pass: the sold-out items, then the winners' items due a check
 * (win_due, asked before s->t.mu is taken: never both locks at once). 0, or
 * -1 out of memory. */
static int pass_collect(struct so *s, struct pass *p)
{
    int rc = 0;
    p->max_buyers = CFG_GET(s->cfg->producer.soldout_max_buyers);
    /* Wakes from here on ask for another pass: a winners item added after
     * win_due is not in this one. */
    pthread_mutex_lock(&s->t.mu);
    s->marked = 0;
    pthread_mutex_unlock(&s->t.mu);
    p->nwin = win_due(s->w, util_mono_us(), s->wids, WIN_MAX_ITEMS);
    pthread_mutex_lock(&s->t.mu);
    p->look = malloc((s->n ? s->n : 1) * sizeof(*p->look));
    p->ids = malloc((s->n + p->nwin + 1) * sizeof(*p->ids));
    if (!p->look || !p->ids) {
        rc = -1;
        goto out;
    }
    p->nlook = p->n = collect_soldout(s, p);
    for (size_t j = 0; j < p->nwin; j++) {
        const struct so_item *it = p->nlook ? find(s, s->wids[j]) : NULL;
        if (it && it->state != SO_NONE) {
            s->wcheck[j] = it->check; /* checked as sold out already */
        } else {
            s->wcheck[j] = p->n;
            p->ids[p->n++] = s->wids[j];
        }
    }
out:
    pthread_mutex_unlock(&s->t.mu);
    return rc;
}

/* Every check of the pass in one pipelined round trip: views[i], ok[i]. An
 * item whose check did not come (its shard down) waits for the next pass,
 * as it is. 0, or -1 (out of memory, or Redis lost the function). */
static int pass_run(struct so *s, struct pass *p)
{
    size_t sent = 0;
    if (!(p->ok = calloc(p->n, 1)) || !(p->views = malloc(p->n * sizeof(*p->views))) ||
        !(p->first = calloc(p->n, sizeof(*p->first))) || !(p->calls = calloc(p->n, sizeof(*p->calls))))
        return -1;
    /* Which slots each item has: a round trip only for the items not
     * learnt in the last BKMAP_TTL_MS (an item not learnt is not checked). */
    (void)bkmap_learn(s->bk, s->link.rp, s->cfg->redis.key_prefix, p->ids, p->n);
    for (; sent < p->n; sent++) {
        p->first[sent] = p->b.n;
        if ((p->calls[sent] = add_check(s, &p->b, p->ids[sent])) < 0)
            break;
    }
    (void)rlink_run(&s->link, &p->b);
    PM_INC(check_passes);
    PM_ADD(item_checks, (int64_t)sent);
    for (size_t i = 0; i < sent; i++)
        p->ok[i] = (char)view_of(s, &p->b, p->first[i], p->calls[i], &p->views[i]);
    if (p->b.missing) {
        script_lost(s);
        return -1;
    }
    return 0;
}

/* The winners table's items' views. Their replies arrived by now, later
 * than Redis ran the checks: what winners.h's reasoning needs. */
static void pass_winners(struct so *s, const struct pass *p)
{
    int64_t at = util_mono_us();
    for (size_t j = 0; j < p->nwin; j++) {
        size_t i = s->wcheck[j];
        if (p->ok[i])
            win_observe(s->w, s->wids[j],
                        &(struct win_view){ p->views[i].exists, p->views[i].buyers, p->views[i].given_back },
                        at);
    }
}

/* One pass over every item Redis said was sold out and every item the
 * winners table asks for, each checked once, all in one pipelined round
 * trip; then a copy of the buyers where they moved. */
static void refresh(struct so *s)
{
    struct pass p = { 0 };
    rp_batch_init(&p.b);
    /* While Redis is down the view stays as it is (see the header). */
    if (pass_collect(s, &p) != 0 || p.n == 0 || !rlink_ok(&s->link) || pass_run(s, &p) != 0)
        goto done;
    pass_winners(s, &p);
    for (size_t i = 0; i < p.nlook && !s->link.down; i++)
        if (p.ok[i])
            settle_item(s, &p.look[i], &p.views[i], p.max_buyers);
done:
    rp_batch_free(&p.b);
    free(p.look);
    free(p.ids);
    free(p.views);
    free(p.ok);
    free(p.first);
    free(p.calls);
}

/* The winners table recorded a new item: check it without waiting a period. */
static void wake(void *arg)
{
    struct so *s = arg;
    pthread_mutex_lock(&s->t.mu);
    s->marked = 1;
    bgt_wake(&s->t);
    pthread_mutex_unlock(&s->t.mu);
}

static void *so_main(void *arg)
{
    struct so *s = arg;
    daemon_signals_block_thread();
    while (!bgt_stopping(&s->t)) {
        refresh(s);
        pthread_mutex_lock(&s->t.mu);
        if (!s->marked)
            bgt_wait_ms(&s->t, CFG_GET(s->cfg->producer.soldout_refresh_ms));
        pthread_mutex_unlock(&s->t.mu);
    }
    return NULL;
}

int so_start(const struct cfg *c, struct win *w, struct so **out, char *err, size_t errlen)
{
    struct so *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->cfg = c;
    s->w = w;
    s->check = (struct rfunc)RFUNC_INIT("seckill_soldout", &funclib_producer);
    s->link = (struct rlink){ .cfg = c,
                              .what = "sold-out and winners checks",
                              .meanwhile = "items known sold out stay so, the others and repeated presses of "
                                           "winners go to Redis",
                              .prepare = check_functions,
                              .arg = s };
    i64map_init(&s->index, 1, sizeof(size_t));
    if (!(s->bk = bkmap_new())) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    /* Redis may come later: the first pass connects (and until then
     * nothing is known sold out). The wake after the start: it takes the
     * thread's mutex, which the start makes; the first pass asks for the
     * winners' items anyway. */
    if (bgt_start(&s->t, so_main, s) != 0) {
        snprintf(err, errlen, "cannot start the sold-out thread");
        goto fail;
    }
    win_set_wake(w, wake, s);
    *out = s;
    return 0;
fail:
    rlink_close(&s->link);
    bkmap_free(s->bk);
    i64map_free(&s->index);
    free(s);
    return -1;
}

void so_stop(struct so *s)
{
    if (!s)
        return;
    /* No wake after this (it takes the mutex the stop frees). */
    win_set_wake(s->w, NULL, NULL);
    bgt_stop(&s->t);
    rlink_close(&s->link);
    for (size_t i = 0; i < s->n; i++)
        holders_free(s->items[i].holders);
    free(s->items);
    i64map_free(&s->index);
    bkmap_free(s->bk);
    free(s);
}
