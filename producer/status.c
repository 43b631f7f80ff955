#include "status.h"

#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bgthread.h"
#include "bkmap.h"
#include "daemon.h"
#include "fifo.h"
#include "keys.h"
#include "log.h"
#include "orderidx.h"
#include "pmetrics.h"
#include "rlink.h"
#include "rpipe.h"
#include "util.h"

/* Requests per pipelined round trip. */
#define ST_BATCH 256

struct st {
    const struct cfg *cfg;
    struct rlink link; /* this thread's Redis */
    /* a batch's round trips: the index, the legacy index, the states */
    struct rp_batch index, legacy, states;
    /* The items' buckets: a buyer's order states live in their bucket's
     * orders hash (bucket.h). */
    struct bkmap *bk;

    struct bgthread t;
    struct fifo in; /* submitted, under t.mu */
    /* Index entries that do not parse (a bug, or a hand edit): every poll of
     * them would say it again. Said once while it lasts. */
    struct log_repeat say_bad_entry;
};

const char *st_state_name(enum st_state s)
{
    switch (s) {
    case ST_NONE: return "none";
    case ST_NOT_FOUND: return "not_found";
    case ST_UNAVAILABLE: return "unavailable";
    default: return ost_json_word(st_order(s));
    }
}

/* The order's states sit in enum st_state as they sit in the table. */
_Static_assert(ST_NOT_FOUND == ST_NONE + 1 + OST_NSTATES, "enum st_state holds the table's states in a row");

enum st_state st_of_order(enum ost_state o)
{
    return (enum st_state)(ST_NONE + 1 + (int)o);
}

enum ost_state st_order(enum st_state s)
{
    return s > ST_NONE && s < ST_NOT_FOUND ? (enum ost_state)(s - ST_NONE - 1) : OST_NONE;
}

/* An orders-hash value (ostate.h) into q's out fields and *user. 0, or -1
 * when it is not one. */
static int st_parse_state(const char *v, size_t len, struct st_req *q, int64_t *user)
{
    struct ost_value d;
    if (ost_decode(v, len, &d) != 0)
        return -1;
    q->state = st_of_order(d.state);
    if (ost_detail(d.state) == OST_DETAIL_MS && d.state == OST_PENDING_PAYMENT)
        q->pay_by_ms = d.detail_ms;
    else if (ost_detail(d.state) == OST_DETAIL_MS)
        q->changed_at_ms = d.detail_ms;
    snprintf(q->reason, sizeof(q->reason), "%s", d.reason);
    q->reserved_at_ms = d.reserved_ms;
    q->settled_at_ms = d.settled_ms;
    *user = d.user_id;
    return 0;
}

/* --- Redis --------------------------------------------------------------- */

/* Run b: each command's reply, or NULL when it did not come (not sent, or
 * lost: a read, safe to ask again at the buyer's next poll). */
static void run(struct st *s, struct rp_batch *b, const redisReply **rep)
{
    (void)rlink_run(&s->link, b);
    for (int i = 0; i < b->n; i++) {
        rep[i] = rp_reply(b, i);
        if (rep[i] && rep[i]->type != REDIS_REPLY_ERROR)
            rlink_worked(&s->link);
    }
}

/* --- answering ----------------------------------------------------------- */

static void done(struct st_req *q, enum st_state state)
{
    q->state = state;
    q->complete(q);
}

/* A by-order index entry "ITEM:USER" into *item and *user. 0, or -1. */
static int parse_entry(const redisReply *r, int64_t *item, int64_t *user)
{
    char v[64], *colon;
    if (r->len >= sizeof(v))
        return -1;
    memcpy(v, r->str, r->len);
    v[r->len] = 0;
    if (!(colon = strchr(v, ':')))
        return -1;
    *colon = 0;
    return util_parse_i64(v, 1, INT64_MAX, item) == 0 && util_parse_i64(colon + 1, 1, INT64_MAX, user) == 0
               ? 0
               : -1;
}

/* Whether a by-order request whose bucket answered r reads the legacy
 * index too: when the buckets do not know the order, and when they hold
 * another buyer's. The second needs nothing from it; it pays the same round
 * trip as the first so that the two 404s cost Redis the same work, and an
 * order id cannot be probed by how long its 404 takes. */
static int reads_legacy(const struct st_req *q, const redisReply *r)
{
    int64_t item, user;
    if (q->kind != ST_BY_ORDER || !r)
        return 0;
    return r->type == REDIS_REPLY_NIL || (r->type == REDIS_REPLY_STRING && q->user_id &&
                                          parse_entry(r, &item, &user) == 0 && user != q->user_id);
}

/* An order the index's buckets do not know may have been indexed before
 * them, under its own key (orderidx.h): ask for those in one more round trip,
 * their replies replacing the misses in rep[] (NULL for one that did not
 * come). Misses pay for it, and so do other buyers' orders (reads_legacy):
 * their bucket's entry stands, unless the legacy read failed, which answers
 * 503 as it does for a miss. A buyer's own order, the polls of a sale, never
 * does. */
static void legacy_lookup(struct st *s, struct st_req **in, size_t n, const redisReply **rep)
{
    char key[KEYS_MAX];
    size_t at[ST_BATCH], m = 0;
    const redisReply *got[ST_BATCH];
    struct rp_batch *b = &s->legacy;
    rp_batch_reset(b);
    for (size_t i = 0; i < n; i++)
        if (reads_legacy(in[i], rep[i])) {
            keys_order_legacy(key, sizeof(key), s->cfg->redis.key_prefix, in[i]->id);
            if (rp_addf(b, key, "GET %s", key) < 0) {
                rep[i] = NULL; /* out of memory: unavailable */
                continue;
            }
            at[m++] = i;
        }
    if (m == 0)
        return;
    run(s, b, got);
    for (size_t j = 0; j < m; j++) {
        const redisReply *g = got[j];
        bool failed = !g || (g->type != REDIS_REPLY_NIL && g->type != REDIS_REPLY_STRING);
        if (rep[at[j]]->type == REDIS_REPLY_NIL || failed)
            rep[at[j]] = g;
    }
}

/* Round trip 1: by order, the index (item and buyer); by item, the caller's
 * order id. A request that resolves to an order keeps going (in[i] stays);
 * the others are answered. */
static int resolve(struct st *s, struct st_req **in, size_t n)
{
    const char *prefix = s->cfg->redis.key_prefix;
    const redisReply *rep[ST_BATCH];
    char key[KEYS_MAX], field_[32];
    struct rp_batch *bt = &s->index;
    rp_batch_reset(bt);
    for (size_t i = 0; i < n; i++) {
        struct st_req *q = in[i];
        if (q->kind == ST_BY_ORDER) {
            keys_order_bucket(key, sizeof(key), prefix, q->id);
            oidx_field(field_, sizeof(field_), q->id);
        } else {
            int salt = bkmap_salt(s->bk, q->id, q->user_id);
            keys_item_at(key, sizeof(key), prefix, q->id, salt, KEYS_ITEM_ORDERS);
            snprintf(field_, sizeof(field_), "u:%" PRId64, q->user_id);
        }
        /* (command i is request i: the batch is whole or nothing) */
        if (rp_addf(bt, key, "HGET %s %s", key, field_) < 0)
            return -1;
    }
    run(s, bt, rep);
    legacy_lookup(s, in, n, rep);
    for (size_t i = 0; i < n; i++) {
        struct st_req *q = in[i];
        const redisReply *r = rep[i];
        int64_t a, b;
        if (!r) {
            done(q, ST_UNAVAILABLE); /* its shard did not answer */
            in[i] = NULL;
        } else if (r->type == REDIS_REPLY_NIL) {
            done(q, q->kind == ST_BY_ORDER ? ST_NOT_FOUND : ST_NONE);
            in[i] = NULL;
        } else if (r->type != REDIS_REPLY_STRING) {
            PM_INC(redis_errors);
            done(q, ST_UNAVAILABLE);
            in[i] = NULL;
        } else if (q->kind == ST_BY_ITEM) {
            if (util_parse_i64(r->str, 1, INT64_MAX, &a) != 0) {
                log_repeat(&s->say_bad_entry, LOG_LVL_WARNING, "redis: status: bad index entries",
                           "redis: status: bad order id for user %" PRId64 " of item %" PRId64
                           " (said once while bad entries are polled)", q->user_id, q->id);
                done(q, ST_NONE);
                in[i] = NULL;
            } else {
                log_repeat_end(&s->say_bad_entry, "a good entry");
                q->order_id = a;
                q->item_id = q->id;
            }
        } else if (parse_entry(r, &a, &b) != 0) {
            log_repeat(&s->say_bad_entry, LOG_LVL_WARNING, "redis: status: bad index entries",
                       "redis: status: bad index entry for order %" PRId64
                       " (said once while bad entries are "
                       "polled)",
                       q->id);
            done(q, ST_NOT_FOUND);
            in[i] = NULL;
        } else if (q->user_id && b != q->user_id) {
            /* Another buyer's order looks exactly like one that does not
             * exist, so ids cannot be probed. */
            done(q, ST_NOT_FOUND);
            in[i] = NULL;
        } else {
            log_repeat_end(&s->say_bad_entry, "a good entry");
            q->order_id = q->id;
            q->item_id = a;
            q->user_id = b;
        }
    }
    return 0;
}

/* Round trip 2's commands for q: the state of its order and, when it wants
 * it, its item's payment window (the same hash tag: the same slot, so the
 * same round trip on a Cluster too). The index of the first, or -1. */
static int add_state(struct st *s, const struct st_req *q)
{
    const char *prefix = s->cfg->redis.key_prefix;
    char key[KEYS_MAX], field_[32];
    struct rp_batch *b = &s->states;
    int salt = bkmap_salt(s->bk, q->item_id, q->user_id);
    keys_item_at(key, sizeof(key), prefix, q->item_id, salt, KEYS_ITEM_ORDERS);
    snprintf(field_, sizeof(field_), "o:%" PRId64, q->order_id);
    int at = rp_addf(b, key, "HGET %s %s", key, field_);
    if (at < 0 || !q->want_pay_window)
        return at;
    /* (the bucket's copy of the window: the same slot, the same round trip) */
    keys_item_at(key, sizeof(key), prefix, q->item_id, salt, KEYS_ITEM_WINDOW);
    return rp_addf(b, key, "HGET %s %s", key, KEYS_WINDOW_PAY) < 0 ? -1 : at;
}

/* q's answer from its state's reply r and, when it wants it, its payment
 * window's pay: a window that does not parse is none, as before the field
 * existed; one that did not come leaves the question open (503). */
static void answer_state(struct st_req *q, const redisReply *r, const redisReply *pay)
{
    int64_t user, secs;
    if (!r || (q->want_pay_window && (!pay || pay->type == REDIS_REPLY_ERROR))) {
        done(q, ST_UNAVAILABLE); /* its shard did not answer */
        return;
    }
    if (r->type != REDIS_REPLY_STRING || st_parse_state(r->str, r->len, q, &user) != 0 ||
        user != q->user_id) {
        /* Given back (the order never was), or not this buyer's. */
        done(q, q->kind == ST_BY_ORDER ? ST_NOT_FOUND : ST_NONE);
        return;
    }
    q->item_pays = q->want_pay_window && pay->type == REDIS_REPLY_STRING &&
                   util_parse_i64(pay->str, 1, INT64_MAX, &secs) == 0;
    done(q, q->state);
}

/* Round trip 2: the state of each resolved order. Every request left in
 * in[] is answered here. */
static int read_states(struct st *s, struct st_req **in, size_t n)
{
    const redisReply *rep[2 * ST_BATCH];
    struct st_req *live[ST_BATCH];
    int at[ST_BATCH];
    struct rp_batch *b = &s->states;
    size_t m = 0;
    rp_batch_reset(b);
    for (size_t i = 0; i < n; i++) {
        if (!in[i])
            continue;
        if ((at[m] = add_state(s, in[i])) < 0) {
            for (size_t j = 0; j < m; j++)
                done(live[j], ST_UNAVAILABLE);
            return -1;
        }
        live[m++] = in[i];
        in[i] = NULL;
    }
    if (m == 0)
        return 0;
    run(s, b, rep);
    for (size_t i = 0; i < m; i++)
        answer_state(live[i], rep[at[i]], live[i]->want_pay_window ? rep[at[i] + 1] : NULL);
    return 0;
}

/* Learn the buckets of the batch's items (by_order: the requests that
 * ask by order, once resolved; else those that ask by item). 0, or -1 when
 * one could not be learnt: reading another slot would answer "none". */
static int learn_items(struct st *s, struct st_req **in, size_t n, bool by_order)
{
    int64_t items[ST_BATCH];
    size_t m = 0;
    int k, salts[BUCKET_MAX];
    for (size_t i = 0; i < n; i++)
        if (in[i] && (in[i]->kind == ST_BY_ORDER) == by_order)
            items[m++] = by_order ? in[i]->item_id : in[i]->id;
    if (m == 0)
        return 0;
    (void)bkmap_learn(s->bk, s->link.rp, s->cfg->redis.key_prefix, items, m);
    for (size_t i = 0; i < m; i++)
        if (!bkmap_get(s->bk, items[i], &k, salts))
            return -1;
    return 0;
}

static void answer_batch(struct st *s, struct st_req **in, size_t n)
{
    if (rlink_ok(&s->link) && learn_items(s, in, n, false) == 0 && resolve(s, in, n) == 0 &&
        learn_items(s, in, n, true) == 0 && read_states(s, in, n) == 0)
        return;
    for (size_t i = 0; i < n; i++)
        if (in[i])
            done(in[i], ST_UNAVAILABLE);
}

static void *st_main(void *arg)
{
    struct st *s = arg;
    daemon_signals_block_thread();
    for (;;) {
        struct st_req *list;
        int stop;
        pthread_mutex_lock(&s->t.mu);
        while (fifo_empty(&s->in) && !bgt_stopping(&s->t))
            bgt_wait_ms(&s->t, -1);
        list = fifo_take_all(&s->in, NULL);
        stop = bgt_stopping(&s->t);
        pthread_mutex_unlock(&s->t.mu);
        while (list) {
            struct st_req *batch[ST_BATCH];
            size_t n = 0;
            while (list && n < ST_BATCH) {
                batch[n++] = list;
                list = list->next;
            }
            answer_batch(s, batch, n);
        }
        if (stop)
            break;
    }
    return NULL;
}

int st_start(const struct cfg *c, struct st **out, char *err, size_t errlen)
{
    struct st *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->cfg = c;
    if (!(s->bk = bkmap_new())) {
        snprintf(err, errlen, "out of memory");
        free(s);
        return -1;
    }
    /* Redis may come later: calls are answered 503 until it does. */
    s->link = (struct rlink){ .cfg = c, .what = "status calls", .count_trips = 1 };
    if (rlink_open(&s->link, err, errlen) != 0)
        err[0] = '\0'; /* rlink_ok() tries again at the first call */
    fifo_init(&s->in, FIFO_LINK(struct st_req, next));
    if (bgt_start(&s->t, st_main, s) != 0) {
        snprintf(err, errlen, "cannot start the status thread");
        goto fail;
    }
    *out = s;
    return 0;
fail:
    rlink_close(&s->link);
    bkmap_free(s->bk);
    free(s);
    return -1;
}

void st_submit(struct st *s, struct st_req *q)
{
    fifo_hand_over(&s->in, &s->t.mu, &s->t.cv, q, q, 1);
}

void st_stop(struct st *s)
{
    if (!s)
        return;
    bgt_stop(&s->t);
    rlink_close(&s->link);
    rp_batch_free(&s->index);
    rp_batch_free(&s->legacy);
    rp_batch_free(&s->states);
    bkmap_free(s->bk);
    free(s);
}
