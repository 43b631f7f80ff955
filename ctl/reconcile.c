#include "reconcile.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctlpg.h"
#include "ctlrp.h"
#include "embed.h"
#include "funclibs.h"
#include "itembk.h"
#include "keys.h"
#include "order.h"
#include "publish.h"
#include "rfunc.h"
#include "rpipe.h"
#include "stockchg.h"
#include "sweep.h"
#include "sweepage.h"
#include "util.h"
#include "xfer.h"

/* A failing check is read again this often before it counts: a sale in
 * flight moves a unit from Redis to the database in a few milliseconds. */
#define RECON_ATTEMPTS 5
#define RECON_RETRY_MS 300
/* Stale states said per item, as examples of what diverged. */
#define RECON_EXAMPLES 3

/* An item's Redis slots (issue #57, bucket.h): its own, index 0 (salt
 * BUCKET_HOME), and bucket b's, index 1 + b. An item without buckets has
 * its own only, and is read and repaired as it was before buckets. */
#define RECON_SLOTS (1 + BUCKET_MAX)

struct ids {
    int64_t *v;
    size_t n, cap;
};

/* What a look found in one of the item's slots that --fix repairs there. */
struct rslot {
    int64_t stock;             /* -1 when the key is missing */
    struct ids done;           /* reservations whose order is persisted (stale) */
    struct ids missing_buyers; /* users with an order or reservation here, not in its set */
};

/* What one look at an item found. */
struct recon {
    int64_t item;
    bool in_db, in_redis;
    int64_t total, left, sold, dup_users; /* PostgreSQL */
    int64_t stock;                        /* Redis, over every slot; -1 when a slot's key is missing */
    int nslots;                           /* 1, or 1 + the buckets */
    struct rslot slot[RECON_SLOTS];
    int64_t xfer_inflight;                /* units a transfer gave, not yet received (xfer.h) */
    int64_t pending_live;                 /* reservations whose order is not persisted */
    int64_t extra_buyers;                 /* in a buyers set with neither */
    int64_t stale_unpub;                  /* unacknowledged by Kafka past the sweep age */
    int64_t bad_pending;                  /* entries that are not order messages */
    int64_t stale_states;                 /* settled orders whose status in Redis disagrees */
    char stale_eg[RECON_EXAMPLES][160];   /* the first of them, said: "order ID: ..." */
    int64_t starts, ends;                 /* the window in PostgreSQL (0: open end) */
    int64_t rstarts, rends;               /* and in Redis, which the script obeys */
    int64_t pay_within_s;                 /* the payment window in PostgreSQL (0: none) */
    int64_t queue_opens_ms;               /* the waiting room's opening in PostgreSQL (0: none) */
    bool paused, rpaused;                 /* the sale paused in PostgreSQL, and in Redis */
    /* After the sale (issue #44): an expired or cancelled order's unit is
     * in stock_left at once, in Redis once its return is done. */
    int64_t ret_inflight; /* returns not done whose order Redis has not taken back: units on their way */
    int64_t ret_unknown;  /* orders in Redis' returned set the database never returned */
    int64_t ret_lost;     /* returns done whose order the returned set lacks */
    /* Live stock changes (issue #57) applied at one end only: their units
     * are on their way between the two (ctl/stockchg.h). */
    struct stockchg_halves chg;
    /* The item's buckets (issue #57, itembk.h): the database's, and what
     * Redis holds of them. */
    struct itembk bk;
    struct itembk_view bkv;
};

/* What the database says of an item's orders, for the checks against Redis. */
struct dbview {
    struct ids orders;              /* every persisted order (sorted) */
    struct ids expect[RECON_SLOTS]; /* users each slot's buyers set must hold */
    struct ids allow[RECON_SLOTS];  /* users it may hold: a buyer whose unit is on its way back */
    struct ids back_done;           /* expired or cancelled orders whose return is done (sorted) */
    struct ids back_open;           /* and those whose return is not (sorted) */
};

struct rctx {
    const struct cfg *c;
    PGconn *pg;
    struct rp *rp; /* each item's calls go to the primary of its slot */
    struct rfunc snap, drop, buyers, lower, window, states;
};

/* Call a function; its reply when it is of the type wanted, else NULL after
 * saying why on stderr. The caller frees the reply. Every function but the
 * snapshot repairs: durable (ctlrp.h). */
static redisReply *eval_want(struct rctx *x, const struct rfunc *s, int nkeys, int nargs, const char **argv,
                             int type)
{
    return ctlrp_fcall(x->rp, s, s != &x->snap, nkeys, nargs, argv, type);
}

static int ids_add(struct ids *s, int64_t v)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        int64_t *nv = realloc(s->v, cap * sizeof(*nv));
        if (!nv)
            return -1;
        s->v = nv;
        s->cap = cap;
    }
    s->v[s->n++] = v;
    return 0;
}

/* Sorted, each id once: for ids_has, which is all the sets are asked. */
static void ids_sort(struct ids *s)
{
    s->n = util_sort_unique_i64(s->v, s->n);
}

static bool ids_has(const struct ids *s, int64_t v)
{
    return s->n && bsearch(&v, s->v, s->n, sizeof(*s->v), util_cmp_i64) != NULL;
}

static void recon_free(struct recon *r)
{
    for (int i = 0; i < RECON_SLOTS; i++) {
        free(r->slot[i].done.v);
        free(r->slot[i].missing_buyers.v);
    }
    stockchg_halves_free(&r->chg);
    memset(r, 0, sizeof(*r));
}

static void dbview_free(struct dbview *d)
{
    free(d->orders.v);
    for (int i = 0; i < RECON_SLOTS; i++) {
        free(d->expect[i].v);
        free(d->allow[i].v);
    }
    free(d->back_done.v);
    free(d->back_open.v);
}

/* The salt of slot i (see RECON_SLOTS). */
static int slot_salt(const struct recon *r, int i)
{
    return i ? r->bk.salts[i - 1] : BUCKET_HOME;
}

/* The slot of user's buyer mark, reservation and status: their bucket's
 * (the producer reserves there, the consumer settles there), or the item's
 * own for an item without buckets. */
static int slot_of(const struct itembk *bk, int64_t user)
{
    return bk->k > 1 ? 1 + bucket_of(user, bk->k) : 0;
}

static size_t count_done(const struct recon *r)
{
    size_t n = 0;
    for (int i = 0; i < r->nslots; i++)
        n += r->slot[i].done.n;
    return n;
}

static size_t count_missing(const struct recon *r)
{
    size_t n = 0;
    for (int i = 0; i < r->nslots; i++)
        n += r->slot[i].missing_buyers.n;
    return n;
}

/* Units the item accounts for: in Redis' stock (every slot's), in flight
 * between its slots, reserved, held by orders, on their way back from
 * expired or cancelled orders, and in a stock change applied at one end
 * only. */
static int64_t accounted(const struct recon *r)
{
    return r->stock + r->xfer_inflight + r->pending_live + r->sold + r->ret_inflight + r->chg.inflight;
}

/* Units in flight count in the stock, but their transfer is half done:
 * until it is finished they sell nowhere (--fix finishes it). */
static bool recon_clean(const struct recon *r)
{
    return r->in_db && r->in_redis && r->stock >= 0 && r->total == accounted(r) && r->ret_unknown == 0 &&
           r->ret_lost == 0 && count_missing(r) == 0 && r->extra_buyers == 0 &&
           r->left == r->total - r->sold && r->dup_users == 0 && r->bad_pending == 0 &&
           r->starts == r->rstarts && r->ends == r->rends && r->paused == r->rpaused &&
           r->stale_states == 0 && r->chg.n == 0 && r->bkv.named && r->bkv.stale_copies == 0 &&
           r->xfer_inflight == 0;
}

/* --- looking ---------------------------------------------------------------- */

static int parse_reply_i64(const redisReply *e, int64_t *out)
{
    if (e->type != REDIS_REPLY_STRING)
        return -1;
    return util_parse_i64(e->str, INT64_MIN, INT64_MAX, out);
}

/* The settled orders (item_states.sql rows) of the users of slot `slot`
 * whose status in that slot's Redis orders hash (field, value, ... as
 * HGETALL gives it) is missing, or names another buyer or another state:
 * the buyer would be told queued, or nothing. Counted into r->stale_states;
 * the first RECON_EXAMPLES of the item go into r->stale_eg, each as what the
 * database says and what Redis holds, for the operator (and whoever looks
 * for the write that diverged). */
static void stale_states(const PGresult *res, const redisReply *h, int slot, struct recon *r)
{
    int64_t n = r->stale_states;
    char(*eg)[160] = r->stale_eg;
    for (int i = 0; i < PQntuples(res); i++) {
        char field[32], want[48];
        const redisReply *v = NULL;
        /* An order expired or cancelled whose return is not done: Redis
         * learns its state with the return; until then either is right. */
        if (strcmp(PQgetvalue(res, i, 6), "f") == 0 || slot_of(&r->bk, ctlpg_i64(res, i, 1)) != slot)
            continue;
        snprintf(field, sizeof(field), "o:%s", PQgetvalue(res, i, 0));
        snprintf(want, sizeof(want), "%s|%s|", PQgetvalue(res, i, 1), PQgetvalue(res, i, 2));
        for (size_t j = 0; h->type == REDIS_REPLY_ARRAY && j + 1 < h->elements && !v; j += 2)
            if (h->element[j]->type == REDIS_REPLY_STRING && strcmp(h->element[j]->str, field) == 0)
                v = h->element[j + 1];
        if (v && v->type == REDIS_REPLY_STRING && strncmp(v->str, want, strlen(want)) == 0)
            continue;
        if (n < RECON_EXAMPLES)
            snprintf(eg[n], sizeof(eg[n]), "order %s: the database says %s.., Redis has %s%.60s%s",
                     PQgetvalue(res, i, 0), want, v && v->type == REDIS_REPLY_STRING ? "'" : "",
                     v && v->type == REDIS_REPLY_STRING ? v->str : "nothing",
                     v && v->type == REDIS_REPLY_STRING ? "'" : "");
        n++;
    }
    r->stale_states = n;
}

/* The item's row: totals, duplicate users, window. 0 or -1 (printed). */
static int read_item(struct rctx *x, const char *const *params, struct recon *r)
{
    PGresult *res = ctlpg_exec(x->pg, embed_recon_item, 1, params, PGRES_TUPLES_OK, "read item");
    if (!res)
        return -1;
    if (PQntuples(res) == 1) {
        r->in_db = true;
        r->total = ctlpg_i64(res, 0, 0);
        r->left = ctlpg_i64(res, 0, 1);
        r->sold = ctlpg_i64(res, 0, 2);
        r->dup_users = ctlpg_i64(res, 0, 3);
        r->starts = ctlpg_i64(res, 0, 4);
        r->ends = ctlpg_i64(res, 0, 5);
        r->pay_within_s = ctlpg_i64(res, 0, 6);
        r->queue_opens_ms = ctlpg_i64(res, 0, 7);
        r->paused = ctlpg_i64(res, 0, 8) == 1;
    }
    PQclear(res);
    return 0;
}

/* The item's buckets (r->bk), and so its slots (r->nslots), from the
 * database: an item it does not hold has its own slot only. 0 or -1
 * (printed). */
static int read_salts(struct rctx *x, const char *const *params, struct recon *r)
{
    PGresult *res = ctlpg_exec(x->pg, embed_recon_buckets, 1, params, PGRES_TUPLES_OK, "read buckets");
    int ret = 0;
    if (!res)
        return -1;
    if (PQntuples(res) == 1 && bucket_parse(PQgetvalue(res, 0, 0), r->bk.salts, &r->bk.k) != 0) {
        fprintf(stderr, "seckillctl: item %" PRId64 ": the database's buckets '%s' are not salts "
                        "seckillctl wrote\n", r->item, PQgetvalue(res, 0, 0));
        ret = -1;
    }
    r->nslots = r->bk.k > 1 ? 1 + r->bk.k : 1;
    PQclear(res);
    return ret;
}

/* Row i of recon_orders.sql into d: its id, and its user as a buyer the
 * buyers set of their slot (bk) must hold (an order holding a unit; an
 * expired or cancelled one when its buyer may not buy again) or may hold
 * (its unit not back in Redis yet). 0 or -1 (out of memory). */
static int take_order(const PGresult *res, int i, bool rebuy, const struct itembk *bk, struct dbview *d)
{
    int64_t oid = ctlpg_i64(res, i, 0), user = ctlpg_i64(res, i, 1);
    bool live = strcmp(PQgetvalue(res, i, 2), "t") == 0, done = strcmp(PQgetvalue(res, i, 3), "t") == 0;
    int s = slot_of(bk, user);
    if (ids_add(&d->orders, oid) != 0 || (!live && ids_add(done ? &d->back_done : &d->back_open, oid) != 0))
        return -1;
    if (live || !rebuy)
        return ids_add(&d->expect[s], user);
    return done ? 0 : ids_add(&d->allow[s], user);
}

/* The persisted orders into d (read_orders' lists). 0 or -1 (printed). */
static int read_orders(struct rctx *x, const char *const *params, const struct itembk *bk, struct dbview *d)
{
    PGresult *res = ctlpg_exec(x->pg, embed_recon_orders, 1, params, PGRES_TUPLES_OK, "read orders");
    bool rebuy = CFG_GET(x->c->sale.rebuy_after_cancel);
    int ret = 0;
    if (!res)
        return -1;
    for (int i = 0; i < PQntuples(res) && ret == 0; i++)
        ret = take_order(res, i, rebuy, bk, d);
    PQclear(res);
    if (ret != 0)
        fprintf(stderr, "seckillctl: out of memory\n");
    ids_sort(&d->orders);
    ids_sort(&d->back_done);
    ids_sort(&d->back_open);
    for (int s = 0; s < RECON_SLOTS; s++)
        ids_sort(&d->allow[s]);
    return ret;
}

/* The returned sets (SMEMBERS; the item's own slot's, and each bucket's:
 * a return of an item in buckets is recorded at both ends, and after an
 * item load only the buckets' hold it) against the database's returns:
 * units on their way, orders given back that the database never returned,
 * returns done the sets lost. (given_back cannot tell a unit given back
 * twice: a producer's give-back of an unpublished reservation counts there
 * too; the stock check sees one.) 0 or -1 (OOM). */
static int read_returned(redisReply *const *snaps, int nslots, const struct dbview *d, struct recon *r)
{
    struct ids in = { 0 }, units = { 0 }; /* every slot's; the item's own (its units) */
    int ret = -1;
    for (int s = 0; s < nslots; s++) {
        const redisReply *set = snaps[s]->element[6];
        for (size_t i = 0; i < set->elements; i++) {
            int64_t oid;
            if (parse_reply_i64(set->element[i], &oid) != 0)
                r->ret_unknown++;
            else if (ids_add(&in, oid) != 0 || (s == 0 && ids_add(&units, oid) != 0))
                goto fail;
        }
    }
    ids_sort(&in); /* (one order in two slots' sets counts once) */
    ids_sort(&units);
    for (size_t i = 0; i < in.n; i++)
        if (!ids_has(&d->back_done, in.v[i]) && !ids_has(&d->back_open, in.v[i]))
            r->ret_unknown++;
    for (size_t i = 0; i < d->back_open.n; i++)
        r->ret_inflight += !ids_has(&units, d->back_open.v[i]);
    for (size_t i = 0; i < d->back_done.n; i++)
        r->ret_lost += !ids_has(&in, d->back_done.v[i]);
    ret = 0;
fail:
    free(in.v);
    free(units.v);
    return ret;
}

/* Stock (each slot's, and their sum), presence and window (the item's own
 * slot's: each bucket's copy of the window is itembk_check's) from the
 * snapshots. */
static void read_scalars(redisReply *const *snaps, struct recon *r)
{
    const redisReply *snap = snaps[0], *stock = snap->element[0];
    r->in_redis = stock->type == REDIS_REPLY_STRING || snap->element[1]->elements > 0 ||
                  snap->element[2]->elements > 0 || snap->element[3]->elements > 0;
    r->stock = 0;
    for (int i = 0; i < r->nslots; i++) {
        const redisReply *e = snaps[i]->element[0];
        int64_t *v = &r->slot[i].stock;
        if (e->type != REDIS_REPLY_STRING || parse_reply_i64(e, v) != 0)
            *v = -1;
        r->stock = r->stock < 0 || *v < 0 ? -1 : r->stock + *v;
    }
    /* A window bound Redis cannot read counts as different (-1). */
    for (int i = 0; i < 2; i++) {
        const redisReply *e = snap->element[4]->element[i];
        int64_t *w = i ? &r->rends : &r->rstarts;
        if (e->type == REDIS_REPLY_STRING && parse_reply_i64(e, w) != 0)
            *w = -1;
    }
    const redisReply *paused = snap->element[4]->element[2];
    r->rpaused = paused->type == REDIS_REPLY_STRING && strcmp(paused->str, "1") == 0;
}

/* One slot's reservations (order id, message, ...): persisted ones are
 * stale (done), the others live, their users expected among the slot's
 * buyers. 0 or -1 (OOM). */
static int read_pending(const redisReply *pend, const struct ids *orders, struct ids *expect,
                        struct ids *done, struct recon *r)
{
    for (size_t i = 0; i + 1 < pend->elements; i += 2) {
        int64_t oid;
        struct order o;
        char err[128];
        const redisReply *v = pend->element[i + 1];
        if (parse_reply_i64(pend->element[i], &oid) != 0 || v->type != REDIS_REPLY_STRING ||
            order_decode(v->str, v->len, &o, err, sizeof(err)) != 0 || o.order_id != oid) {
            r->bad_pending++;
        } else if (ids_has(orders, oid)) {
            if (ids_add(done, oid) != 0)
                return -1;
        } else {
            r->pending_live++;
            if (ids_add(expect, o.user_id) != 0)
                return -1;
        }
    }
    return 0;
}

/* A slot's buyers set against the users expected in it (sorted here) and
 * those it may hold (allow, sorted): those it lacks into missing. 0 or -1. */
static int read_buyers(const redisReply *set, struct ids *expect, const struct ids *allow,
                       struct ids *missing, struct recon *r)
{
    struct ids buyers = { 0 };
    int ret = -1;
    for (size_t i = 0; i < set->elements; i++) {
        int64_t u;
        if (parse_reply_i64(set->element[i], &u) != 0)
            r->extra_buyers++;
        else if (ids_add(&buyers, u) != 0)
            goto out;
    }
    ids_sort(expect);
    ids_sort(&buyers);
    for (size_t i = 0; i < expect->n; i++)
        if (!ids_has(&buyers, expect->v[i]) && ids_add(missing, expect->v[i]) != 0)
            goto out;
    for (size_t i = 0; i < buyers.n; i++)
        if (!ids_has(expect, buyers.v[i]) && !ids_has(allow, buyers.v[i]))
            r->extra_buyers++;
    ret = 0;
out:
    free(buyers.v);
    return ret;
}

/* Unacknowledged reservations (order id, score, ...) of unpersisted orders
 * older than the cutoff. */
static int64_t stale_unpublished(const redisReply *unpub, const struct ids *orders, int64_t cutoff)
{
    int64_t n = 0;
    for (size_t i = 0; i + 1 < unpub->elements; i += 2) {
        int64_t oid, at;
        if (parse_reply_i64(unpub->element[i], &oid) == 0 && !ids_has(orders, oid) &&
            parse_reply_i64(unpub->element[i + 1], &at) == 0 && at < cutoff)
            n++;
    }
    return n;
}

/* One slot's state at one instant (seckill_recon_snapshot3 on its keys:
 * one call, so no reservation moves between its reads), checked for the
 * shape look reads. NULL after saying why. */
static redisReply *snap_slot(struct rctx *x, int64_t item, int salt)
{
    char k[KEYS_ITEM_PARTS][KEYS_MAX], returned[KEYS_MAX], changes[KEYS_MAX];
    const char *prefix = x->c->redis.key_prefix;
    if (keys_item_all_at(k, prefix, item, salt) != 0 ||
        keys_item_at(returned, sizeof(returned), prefix, item, salt, KEYS_ITEM_RETURNED) < 0 ||
        keys_item_at(changes, sizeof(changes), prefix, item, salt, KEYS_ITEM_CHANGES) < 0) {
        fprintf(stderr, "seckillctl: redis key prefix too long\n");
        return NULL;
    }
    const char *kv[] = { k[KEYS_ITEM_STOCK],
                         k[KEYS_ITEM_BUYERS],
                         k[KEYS_ITEM_PENDING],
                         k[KEYS_ITEM_UNPUB],
                         k[KEYS_ITEM_WINDOW],
                         k[KEYS_ITEM_ORDERS],
                         returned,
                         changes };
    redisReply *rep = eval_want(x, &x->snap, 8, 0, kv, REDIS_REPLY_ARRAY);
    if (rep && (rep->elements != 8 || rep->element[4]->type != REDIS_REPLY_ARRAY ||
                rep->element[4]->elements != 3 || rep->element[6]->type != REDIS_REPLY_ARRAY ||
                rep->element[7]->type != REDIS_REPLY_ARRAY)) {
        fprintf(stderr, "seckillctl: redis: unexpected snapshot\n");
        freeReplyObject(rep);
        rep = NULL;
    }
    return rep;
}

/* The units in flight between the item's slots (xfer.h): given by a
 * transfer whose receiving half is missing, from each slot's record of what
 * it gave. Nothing is finished here. 0, or -1 (said). */
static int read_xfers(struct rctx *x, struct recon *r)
{
    for (int i = 0; i < r->nslots; i++) {
        struct xfer_tally t;
        char err[512];
        if (xfer_finish(x->rp, x->c->redis.key_prefix, r->item, slot_salt(r, i), false, &t, err,
                        sizeof(err)) != 0) {
            fprintf(stderr, "seckillctl: redis: item %" PRId64 ": reading its transfers: %s\n", r->item, err);
            return -1;
        }
        r->xfer_inflight += t.in_flight;
    }
    return 0;
}

/* Each slot's reservations and buyers against the database's orders (d): a
 * reservation in a bucket is one like any other, its user expected in that
 * bucket's buyers set, as an order's user is in the set of their bucket.
 * 0 or -1 (OOM). */
static int read_slots(redisReply *const *snaps, struct dbview *d, struct recon *r)
{
    for (int i = 0; i < r->nslots; i++) {
        struct rslot *s = &r->slot[i];
        if (read_pending(snaps[i]->element[1], &d->orders, &d->expect[i], &s->done, r) != 0 ||
            read_buyers(snaps[i]->element[2], &d->expect[i], &d->allow[i], &s->missing_buyers, r) != 0)
            return -1;
    }
    return 0;
}

/* Redis first, then the database: an order that moves from one to the other
 * in between is then seen in the database (and its stale reservation
 * recognised as such), never in neither. Each slot of the item (its own,
 * and each bucket's, issue #57) is read in one script on its own shard, then
 * the transfers between them: the sum over the slots is no one instant
 * across shards (a unit moved between two reads can be counted twice or
 * not at all), which reconcile accepts: it is an operator's check run while
 * the sale is quiet, and a failing check is read again (look_settled). */
static int look(struct rctx *x, int64_t item, struct recon *r)
{
    char sid[24];
    const char *params[] = { sid };
    struct dbview d = { 0 };
    redisReply *snaps[RECON_SLOTS] = { 0 };
    PGresult *res = NULL;
    int ret = -1;

    memset(r, 0, sizeof(*r));
    r->item = item;
    r->stock = -1;
    snprintf(sid, sizeof(sid), "%" PRId64, item);
    if (read_salts(x, params, r) != 0)
        return -1;
    for (int i = 0; i < r->nslots; i++)
        if (!(snaps[i] = snap_slot(x, item, slot_salt(r, i))))
            goto fail;
    if (r->nslots > 1 && read_xfers(x, r) != 0)
        goto fail;
    /* The stock changes are the item's own slot's (stockchg.h), as are the
     * returned units (the buckets record their buyers' returns: read_returned). */
    if (read_item(x, params, r) != 0 || stockchg_halves(x->pg, item, snaps[0]->element[7], &r->chg) != 0 ||
        read_orders(x, params, &r->bk, &d) != 0)
        goto fail;
    read_scalars(snaps, r);
    r->bkv.named = true;
    if (r->in_db && itembk_check(x->rp, x->c, item, &r->bk, &r->bkv) != 0)
        goto fail;
    if (read_slots(snaps, &d, r) != 0 || read_returned(snaps, r->nslots, &d, r) != 0) {
        fprintf(stderr, "seckillctl: out of memory\n");
        goto fail;
    }
    int64_t cutoff = util_wall_ms() - sweep_age_ms(x->c);
    for (int i = 0; i < r->nslots; i++)
        r->stale_unpub += stale_unpublished(snaps[i]->element[3], &d.orders, cutoff);
    if (!(res = ctlpg_exec(x->pg, embed_item_states, 1, params, PGRES_TUPLES_OK, "read settled orders")))
        goto fail;
    for (int i = 0; i < r->nslots; i++)
        stale_states(res, snaps[i]->element[5], i, r);
    ret = 0;
fail:
    dbview_free(&d);
    if (res)
        PQclear(res);
    for (int i = 0; i < RECON_SLOTS; i++)
        if (snaps[i])
            freeReplyObject(snaps[i]);
    return ret;
}

/* Look until clean or out of attempts; the last look is in *r. */
static int look_settled(struct rctx *x, int64_t item, struct recon *r)
{
    for (int attempt = 0;; attempt++) {
        if (look(x, item, r) != 0)
            return -1;
        /* A missing item or stock is not a sale in flight: no use waiting. */
        if (recon_clean(r) || !r->in_db || r->stock < 0 || attempt + 1 >= RECON_ATTEMPTS)
            return 0;
        recon_free(r);
        util_sleep_ms(RECON_RETRY_MS);
    }
}

/* --- telling ---------------------------------------------------------------- */

static void header(void)
{
    printf("%14s %8s %8s %8s %8s %10s %8s %8s %9s  %s\n", "item", "total", "redis", "pending", "sold",
           "stock_left", "buyers", "dupusers", "returning", "state");
}

/* Where an item's Redis stock is, for an item with buckets: its own slot,
 * each bucket, and in flight between them. */
static void row_buckets(const struct recon *r)
{
    char each[BUCKET_MAX * 22] = "";
    size_t at = 0;
    for (int i = 1; i < r->nslots && at < sizeof(each); i++) {
        int n = r->slot[i].stock >= 0 ? snprintf(each + at, sizeof(each) - at, " %" PRId64, r->slot[i].stock)
                                      : snprintf(each + at, sizeof(each) - at, " -");
        at += n > 0 ? (size_t)n : 0;
    }
    char own[24] = "-";
    if (r->slot[0].stock >= 0)
        snprintf(own, sizeof(own), "%" PRId64, r->slot[0].stock);
    printf("  item %" PRId64 ": Redis stock in its own slot %s, in its %d buckets%s; %" PRId64
           " units in flight between them\n", r->item, own, r->nslots - 1, each, r->xfer_inflight);
}

static void row(const struct recon *r)
{
    char redis[24];
    if (r->stock >= 0)
        snprintf(redis, sizeof(redis), "%" PRId64, r->stock);
    else
        snprintf(redis, sizeof(redis), "-");
    printf("%14" PRId64 " %8" PRId64 " %8s %8" PRId64 " %8" PRId64 " %10" PRId64 " %8s %8" PRId64 " %9" PRId64
           "  %s\n",
           r->item, r->total, redis, r->pending_live, r->sold, r->left,
           count_missing(r) || r->extra_buyers ? "differ" : "match", r->dup_users, r->ret_inflight,
           recon_clean(r) ? "ok" : "MISMATCH");
    if (r->nslots > 1)
        row_buckets(r);
}

/* What a look found of the returns of expired or cancelled orders. */
static void problems_returns(const struct recon *r)
{
    if (r->ret_unknown)
        printf("  item %" PRId64 ": %" PRId64 " orders are in Redis' returned set that the database never "
               "returned: their units were given back while their orders hold them\n",
               r->item, r->ret_unknown);
    if (r->ret_lost)
        printf("  item %" PRId64 ": %" PRId64 " returns are done in the database but missing from Redis' "
               "returned set (Redis lost it?): a return sent again would give their units twice\n",
               r->item, r->ret_lost);
}

/* What a look found of the item's buckets (itembk.h). */
static void problems_buckets(const struct recon *r)
{
    char text[BUCKET_MAX * 6];
    bucket_format(text, sizeof(text), r->bk.salts, r->bk.k);
    if (!r->bkv.named)
        printf("  item %" PRId64 ": Redis names the buckets '%s', the database '%s'\n", r->item, r->bkv.names,
               text);
    if (r->bkv.stale_copies)
        printf("  item %" PRId64 ": %d buckets' windows differ from the item's\n", r->item,
               r->bkv.stale_copies);
}

/* What a look found of the stock: a slot without it, the units unaccounted
 * for, and those in flight between the item's slots (issue #57). */
static void problems_stock(const struct recon *r)
{
    int64_t sum = accounted(r);
    int lost = 0;
    for (int i = 1; i < r->nslots; i++)
        lost += r->slot[i].stock < 0;
    if (r->stock < 0 && (r->slot[0].stock < 0 || !lost)) {
        printf("  item %" PRId64 ": Redis holds no stock for it (Redis lost its data?): "
               "run 'seckillctl item load --id %" PRId64 "'\n", r->item, r->item);
    } else if (r->stock < 0) {
        printf("  item %" PRId64 ": Redis holds no stock for %d of its buckets (Redis lost them?): its units "
               "cannot be counted\n", r->item, lost);
    } else if (r->total != sum) {
        char changing[48] = "", moving[48] = ""; /* said only when a change or a transfer is half done */
        if (r->chg.inflight)
            snprintf(changing, sizeof(changing), " + changing %" PRId64, r->chg.inflight);
        if (r->xfer_inflight)
            snprintf(moving, sizeof(moving), " + in flight %" PRId64, r->xfer_inflight);
        printf("  item %" PRId64 ": stock_total %" PRId64 " != Redis stock %" PRId64 "%s + reserved %" PRId64
               " + sold %" PRId64 " + returning %" PRId64 "%s (%+" PRId64 " units)\n",
               r->item, r->total, r->stock, moving, r->pending_live, r->sold, r->ret_inflight, changing,
               sum - r->total);
    }
    if (r->xfer_inflight)
        printf("  item %" PRId64 ": %" PRId64 " units in flight between its slots: transfers whose receiving "
               "half is missing (their units sell nowhere until --fix finishes them)\n",
               r->item, r->xfer_inflight);
}

static void problems(const struct recon *r)
{
    if (!r->in_db) {
        printf("  item %" PRId64 ": not in the database\n", r->item);
        return;
    }
    problems_stock(r);
    problems_returns(r);
    stockchg_halves_say(r->item, &r->chg);
    if (count_missing(r))
        printf("  item %" PRId64
               ": %zu users with an order or reservation are missing from the Redis buyers set\n",
               r->item, count_missing(r));
    if (r->extra_buyers)
        printf("  item %" PRId64 ": %" PRId64 " users in the Redis buyers set hold neither an order nor a "
               "reservation\n", r->item, r->extra_buyers);
    if (r->left != r->total - r->sold)
        printf("  item %" PRId64 ": stock_left %" PRId64 " != stock_total %" PRId64 " - sold %" PRId64 "\n",
               r->item, r->left, r->total, r->sold);
    if (r->dup_users)
        printf("  item %" PRId64 ": %" PRId64 " users hold more than one order\n", r->item, r->dup_users);
    if (r->bad_pending)
        printf("  item %" PRId64 ": %" PRId64 " reservations do not hold an order message\n", r->item,
               r->bad_pending);
    if (count_done(r))
        printf("  item %" PRId64 ": %zu reservations are persisted already and were never cleared\n", r->item,
               count_done(r));
    if (r->stale_unpub)
        printf("  item %" PRId64 ": %" PRId64 " reservations were never acknowledged by Kafka\n", r->item,
               r->stale_unpub);
    if (r->stale_states)
        printf("  item %" PRId64 ": %" PRId64 " settled orders show another status to their buyers than the "
               "database's\n", r->item, r->stale_states);
    for (int64_t i = 0; i < r->stale_states && i < RECON_EXAMPLES; i++)
        printf("    %s\n", r->stale_eg[i]);
    if (r->starts != r->rstarts || r->ends != r->rends)
        printf("  item %" PRId64 ": the sale window in Redis (%" PRId64 " .. %" PRId64 ") differs from the "
               "database's (%" PRId64 " .. %" PRId64 ", ms; 0 = open)\n",
               r->item, r->rstarts, r->rends, r->starts, r->ends);
    if (r->paused != r->rpaused)
        printf("  item %" PRId64 ": the sale is %s in Redis, %s in the database\n", r->item,
               r->rpaused ? "paused" : "not paused", r->paused ? "paused" : "not paused");
    problems_buckets(r);
}

/* Redis's window := the database's; the reservation script obeys Redis's.
 * One call sets the sale window, the payment window (the producer's cancel
 * reads it), the waiting room's opening and the pause together: a buyer
 * never meets the hash half written. */
static int fix_window(struct rctx *x, const struct recon *r, char k[KEYS_ITEM_PARTS][KEYS_MAX])
{
    char v[4][24] = { "", "", "", "" };
    const int64_t set[4] = { r->starts, r->ends, r->pay_within_s, r->queue_opens_ms };
    for (int i = 0; i < 4; i++)
        if (set[i] > 0)
            snprintf(v[i], sizeof(v[i]), "%" PRId64, set[i]);
    const char *argv[] = { k[KEYS_ITEM_WINDOW], v[0], v[1], v[2], v[3], r->paused ? "1" : "" };
    redisReply *rep = eval_want(x, &x->window, 1, 5, argv, REDIS_REPLY_INTEGER);
    if (!rep)
        return -1;
    freeReplyObject(rep);
    /* And each bucket's copy of it (itembk.h). */
    if (itembk_copy_window(x->rp, x->c, r->item) != 0)
        return -1;
    printf("  fixed: item %" PRId64 ": sale window in Redis set to the database's%s\n", r->item,
           r->paused ? " (paused)" : "");
    return 0;
}

/* --- repairing ---------------------------------------------------------------- */

/* The status of the settled orders (res: item_states.sql) of slot `slot`'s
 * buyers := the database's, in that slot's orders hash, in one call (none
 * when it has none of them). argv: room for every row. */
static int fix_states_in(struct rctx *x, const struct recon *r, const PGresult *res, int slot,
                         const char **argv, int64_t *changed)
{
    char orders[KEYS_MAX];
    int m = 0;
    if (keys_item_at(orders, sizeof(orders), x->c->redis.key_prefix, r->item, slot_salt(r, slot),
                     KEYS_ITEM_ORDERS) < 0) {
        fprintf(stderr, "seckillctl: redis key prefix too long\n");
        return -1;
    }
    argv[0] = orders;
    for (int i = 0; i < PQntuples(res); i++) {
        if (slot_of(&r->bk, ctlpg_i64(res, i, 1)) != slot)
            continue;
        for (int f = 0; f < 6; f++)
            argv[1 + (size_t)m * 6 + (size_t)f] = PQgetvalue(res, i, f);
        m++;
    }
    if (m == 0)
        return 0;
    redisReply *rep = eval_want(x, &x->states, 1, m * 6, argv, REDIS_REPLY_INTEGER);
    if (!rep)
        return -1;
    *changed += rep->integer;
    freeReplyObject(rep);
    return 0;
}

/* The buyers' status of every settled order := the database's, in its
 * buyer's slot. */
static int fix_states(struct rctx *x, const struct recon *r)
{
    char sid[24];
    const char *params[] = { sid };
    const char **argv = NULL;
    PGresult *res;
    int64_t changed = 0;
    int ret = -1;
    snprintf(sid, sizeof(sid), "%" PRId64, r->item);
    if (!(res = ctlpg_exec(x->pg, embed_item_states, 1, params, PGRES_TUPLES_OK, "read settled orders")))
        return -1;
    if (!(argv = calloc((size_t)PQntuples(res) * 6 + 1, sizeof(*argv)))) {
        fprintf(stderr, "seckillctl: out of memory\n");
        goto fail;
    }
    for (int i = 0; i < r->nslots; i++)
        if (fix_states_in(x, r, res, i, argv, &changed) != 0)
            goto fail;
    printf("  fixed: item %" PRId64 ": set the status of %" PRId64 " settled orders to the database's\n",
           r->item, changed);
    ret = 0;
fail:
    free(argv);
    PQclear(res);
    return ret;
}

static int run_ids(struct rctx *x, const struct rfunc *s, int nkeys, const char **keys, const struct ids *v,
                   int64_t *count)
{
    size_t n = (size_t)nkeys + v->n;
    const char **argv = calloc(n ? n : 1, sizeof(*argv));
    char (*num)[24] = calloc(v->n ? v->n : 1, sizeof(*num));
    redisReply *rep = NULL;
    int ret = -1;
    if (!argv || !num) {
        fprintf(stderr, "seckillctl: out of memory\n");
        goto fail;
    }
    for (int i = 0; i < nkeys; i++)
        argv[i] = keys[i];
    for (size_t i = 0; i < v->n; i++) {
        snprintf(num[i], sizeof(num[i]), "%" PRId64, v->v[i]);
        argv[(size_t)nkeys + i] = num[i];
    }
    if (!(rep = eval_want(x, s, nkeys, (int)v->n, argv, REDIS_REPLY_INTEGER)))
        goto fail;
    *count = rep->integer;
    ret = 0;
fail:
    if (rep)
        freeReplyObject(rep);
    free(argv);
    free(num);
    return ret;
}

static int fix_left(struct rctx *x, const struct recon *r)
{
    char sid[24];
    const char *params[] = { sid };
    PGresult *res;
    snprintf(sid, sizeof(sid), "%" PRId64, r->item);
    if (ctlpg_cmd(x->pg, "BEGIN", "begin") != 0)
        return -1;
    if (!(res = ctlpg_exec(x->pg, embed_recon_lock_item, 1, params, PGRES_TUPLES_OK, "lock item")))
        goto fail;
    PQclear(res);
    if (!(res = ctlpg_exec(x->pg, embed_recon_fix_left, 1, params, PGRES_TUPLES_OK, "set stock_left")))
        goto fail;
    printf("  fixed: item %" PRId64 ": stock_left %" PRId64 " -> %s (stock_total - persisted orders)\n",
           r->item, r->left, PQntuples(res) ? PQgetvalue(res, 0, 0) : "?");
    PQclear(res);
    return ctlpg_cmd(x->pg, "COMMIT", "commit");
fail:
    ctlpg_cmd(x->pg, "ROLLBACK", "rollback");
    return -1;
}

/* Lower slot i's stock from seen to `to`, only if it still holds seen. 1
 * lowered, 0 changed meanwhile (said), -1 (said). */
static int lower_slot(struct rctx *x, const struct recon *r, int i, int64_t seen, int64_t to, int64_t excess)
{
    char key[KEYS_MAX], vseen[24], want[24], where[48] = "";
    const char *argv[] = { key, vseen, want };
    int salt = slot_salt(r, i);
    if (keys_item_at(key, sizeof(key), x->c->redis.key_prefix, r->item, salt, KEYS_ITEM_STOCK) < 0) {
        fprintf(stderr, "seckillctl: redis key prefix too long\n");
        return -1;
    }
    if (r->nslots > 1 && i)
        snprintf(where, sizeof(where), " in its bucket %d (salt %d)", i - 1, salt);
    else if (r->nslots > 1)
        snprintf(where, sizeof(where), " in its own slot");
    snprintf(vseen, sizeof(vseen), "%" PRId64, seen);
    snprintf(want, sizeof(want), "%" PRId64, to);
    redisReply *rep = eval_want(x, &x->lower, 1, 2, argv, REDIS_REPLY_INTEGER);
    if (!rep)
        return -1;
    int lowered = rep->integer != 0;
    if (!lowered)
        printf("  not fixed: item %" PRId64 ": its stock changed while being repaired; run reconcile again\n",
               r->item);
    else
        printf("  fixed: item %" PRId64 ": Redis stock%s %" PRId64 " -> %" PRId64
               " (it offered %" PRId64 " units more than the orders leave)\n",
               r->item, where, seen, to, excess);
    freeReplyObject(rep);
    return lowered;
}

/* Redis offers more units than the orders leave: its stock lowered by the
 * excess. With buckets, slot by slot: the item's own first (the reserve,
 * which no buyer reserves from), then each bucket's, until the excess is
 * gone (units in flight are not touched: they are some slot's once their
 * transfer is finished). */
static int fix_stock(struct rctx *x, const struct recon *r)
{
    int64_t excess = accounted(r) - r->total, left = excess;
    for (int i = 0; i < r->nslots && left > 0; i++) {
        int64_t seen = r->slot[i].stock, to = seen - left < 0 ? 0 : seen - left;
        if (seen <= 0 && r->nslots > 1)
            continue;
        int lowered = lower_slot(x, r, i, seen, to, excess);
        if (lowered <= 0)
            return lowered;
        left -= seen - to;
    }
    return 0;
}

/* Finish the transfers whose receiving half is missing, from each slot's
 * record of what it gave (xfer_finish: once enough replicas hold that
 * record; a half applied meanwhile by its mover is not applied twice). */
static int fix_xfers(struct rctx *x, const struct recon *r)
{
    int64_t finished = 0;
    for (int i = 0; i < r->nslots; i++) {
        struct xfer_tally t;
        char err[512];
        if (xfer_finish(x->rp, x->c->redis.key_prefix, r->item, slot_salt(r, i), true, &t, err,
                        sizeof(err)) != 0) {
            fprintf(stderr, "seckillctl: redis: item %" PRId64 ": finishing its transfers: %s\n", r->item,
                    err);
            return -1;
        }
        finished += t.finished;
    }
    printf("  fixed: item %" PRId64 ": finished %" PRId64 " transfers (their receiving halves applied; %"
           PRId64 " units were in flight)\n", r->item, finished, r->xfer_inflight);
    return 0;
}

/* The stale reservations dropped and the missing buyers added, each in the
 * slot where the look found them. */
static int fix_slots(struct rctx *x, const struct recon *r)
{
    int64_t dropped = 0, added = 0, n;
    for (int i = 0; i < r->nslots; i++) {
        const struct rslot *s = &r->slot[i];
        char k[KEYS_ITEM_PARTS][KEYS_MAX];
        if (keys_item_all_at(k, x->c->redis.key_prefix, r->item, slot_salt(r, i)) != 0)
            return -1;
        const char *drop[] = { k[KEYS_ITEM_PENDING], k[KEYS_ITEM_UNPUB] };
        const char *buyers[] = { k[KEYS_ITEM_BUYERS] };
        if (s->done.n && run_ids(x, &x->drop, 2, drop, &s->done, &n) != 0)
            return -1;
        dropped += s->done.n ? n : 0;
        if (s->missing_buyers.n && r->stock >= 0 && run_ids(x, &x->buyers, 1, buyers, &s->missing_buyers, &n))
            return -1;
        added += s->missing_buyers.n && r->stock >= 0 ? n : 0;
    }
    if (count_done(r))
        printf("  fixed: item %" PRId64 ": dropped %" PRId64 " reservations whose orders are persisted\n",
               r->item, dropped);
    if (count_missing(r) && r->stock >= 0)
        printf("  fixed: item %" PRId64 ": added %" PRId64 " users with an order or reservation to the "
               "buyers set\n", r->item, added);
    return 0;
}

static int sweep_stale(struct rctx *x)
{
    struct pub *p = NULL;
    struct sweep_stats st;
    char err[512];
    int ret = -1;
    if (pub_open(x->c, &p, err, sizeof(err)) != 0 ||
        sweep_once(x->c, x->rp, p, sweep_age_ms(x->c), &st, err, sizeof(err)) != 0) {
        fprintf(stderr, "seckillctl: sweep: %s\n", err);
        goto fail;
    }
    printf("  fixed: re-published %" PRId64 " reservations Kafka never acknowledged (%" PRId64 " failed)\n",
           st.republished, st.failed);
    ret = 0;
fail:
    pub_close(p, PUB_CLOSE_TIMEOUT_MS);
    return ret;
}

/* What --fix leaves to a person, said. */
static void not_fixed(struct rctx *x, const struct recon *r, char k[KEYS_ITEM_PARTS][KEYS_MAX])
{
    if (r->stock < 0 && r->slot[0].stock >= 0)
        printf("  not fixed: item %" PRId64 ": a bucket's stock is gone; rebuilding buckets is not built yet "
               "(issue #57)\n", r->item);
    else if (r->stock < 0)
        printf("  not fixed: item %" PRId64 ": rebuild it with 'seckillctl item load --id %" PRId64 "'\n",
               r->item, r->item);
    else if (accounted(r) < r->total)
        printf("  not fixed: item %" PRId64 ": %" PRId64
               " units are unaccounted for and stay out of the sale: "
               "one may be an order still on its way (replay the topic and look again); give units back "
               "only once sure, with 'redis-cli%s INCRBY %s N'\n",
               r->item, r->total - accounted(r), rp_cluster(x->rp) ? " -c" : "",
               k[KEYS_ITEM_STOCK]); /* -c: to the key's shard; with buckets, the reserve's */
    if (r->extra_buyers)
        printf("  not fixed: item %" PRId64 ": users in the buyers set without an order stay (a rejected or "
               "lost order): removing them would let them buy again\n", r->item);
    if (r->dup_users)
        printf("  not fixed: item %" PRId64 ": users with two orders need a person: the orders_one_per_user "
               "constraint should have made this impossible\n", r->item);
    if (r->ret_unknown || r->ret_lost)
        printf("  not fixed: item %" PRId64 ": the returns need a person: a unit given back twice is on sale "
               "twice (the stock check lowers an excess it sees), and a lost returned set is rebuilt with "
               "the item ('seckillctl item load --id %" PRId64 "' once Redis lost the item)\n",
               r->item, r->item);
}

/* Only what cannot sell a unit twice or lose an order: see the README. The
 * stock is lowered before transfers are finished: the look saw each slot's
 * stock before their units arrive. */
static int fix(struct rctx *x, const struct recon *r)
{
    char k[KEYS_ITEM_PARTS][KEYS_MAX];
    if (!r->in_db || keys_item_all(k, x->c->redis.key_prefix, r->item) != 0)
        return 0;
    if (fix_slots(x, r) != 0)
        return -1;
    if (r->chg.n && stockchg_finish(x->pg, x->rp, x->c, r->item, &r->chg) != 0)
        return -1;
    if (r->left != r->total - r->sold && fix_left(x, r) != 0)
        return -1;
    if (r->stock >= 0 && accounted(r) > r->total && fix_stock(x, r) < 0)
        return -1;
    if (r->stock >= 0 && r->xfer_inflight && fix_xfers(x, r) != 0)
        return -1;
    if (r->stale_unpub && sweep_stale(x) != 0)
        return -1;
    if ((!r->bkv.named || r->bkv.stale_copies) && r->stock >= 0) {
        /* First: the window's fix below copies to the buckets Redis names. */
        if (itembk_publish(x->rp, x->c, r->item, &r->bk) != 0)
            return -1;
        printf("  fixed: item %" PRId64 ": Redis names the database's buckets, each with the item's window\n",
               r->item);
    }
    bool window_differs = r->starts != r->rstarts || r->ends != r->rends || r->paused != r->rpaused;
    if (window_differs && fix_window(x, r, k) != 0)
        return -1;
    if (r->stale_states && r->stock >= 0 && fix_states(x, r) != 0)
        return -1;
    not_fixed(x, r, k);
    return 0;
}

/* --- the command ------------------------------------------------------------ */

static void usage(FILE *f)
{
    fputs("usage: seckillctl [-c FILE] reconcile [--item ID] [--fix]\n", f);
}

int reconcile_cmd(const struct cfg *c, int argc, char **argv)
{
    static const struct option opts[] = {
        { "item", required_argument, NULL, 'i' },
        { "fix", no_argument, NULL, 'f' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    struct rctx x = {
        .c = c,
        .snap = RFUNC_INIT("seckill_recon_snapshot3", &funclib_ctl),
        .drop = RFUNC_INIT("seckill_recon_drop", &funclib_ctl),
        .buyers = RFUNC_INIT("seckill_recon_buyers", &funclib_ctl),
        .lower = RFUNC_INIT("seckill_recon_lower", &funclib_ctl),
        .window = RFUNC_INIT("seckill_recon_window2", &funclib_ctl),
        .states = RFUNC_INIT("seckill_recon_states", &funclib_ctl),
    };
    int64_t item = 0, *ids = NULL;
    size_t n = 0, bad = 0;
    bool do_fix = false;
    int o, ret = 1;

    optind = 1;
    while ((o = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        if (o == 'i' && util_parse_i64(optarg, 1, INT64_MAX, &item) == 0)
            continue;
        if (o == 'f') {
            do_fix = true;
            continue;
        }
        usage(o == 'h' ? stdout : stderr);
        return o == 'h' ? 0 : 2;
    }
    if (optind != argc) {
        usage(stderr);
        return 2;
    }
    if (!(x.pg = ctlpg_open(c)))
        return 1;
    if (!(x.rp = ctlrp_open(c)))
        goto fail;
    if (item) {
        if (!(ids = malloc(sizeof(*ids))))
            goto fail;
        ids[0] = item;
        n = 1;
    } else if (ctlpg_item_ids(x.pg, &ids, &n) != 0) {
        goto fail;
    }
    header();
    for (size_t i = 0; i < n; i++) {
        struct recon r;
        if (look_settled(&x, ids[i], &r) != 0)
            goto fail;
        row(&r);
        if (!recon_clean(&r)) {
            problems(&r);
            if (do_fix) {
                int fixed = fix(&x, &r);
                recon_free(&r);
                if (fixed != 0 || look_settled(&x, ids[i], &r) != 0)
                    goto fail;
                row(&r);
            }
        }
        bad += !recon_clean(&r);
        recon_free(&r);
    }
    printf("%zu items checked, %zu %s\n", n, bad, bad == 1 ? "mismatch" : "mismatches");
    ret = bad ? 1 : 0;
fail:
    free(ids);
    rp_close(x.rp);
    PQfinish(x.pg);
    return ret;
}
