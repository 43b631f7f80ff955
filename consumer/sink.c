#include "sink.h"

#include <inttypes.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embed.h"
#include "i64map.h"
#include "metrics.h"
#include "pgarr.h"
#include "pgsess.h"
#include "pgtrip.h"
#include "queue.h"
#include "util.h"

/* --- per-batch scratch, kept from one batch to the next ------------------ */

/* The array parameters of the statements, one per parameter of each.
 * (libpq copies a parameter when the statement is queued, so one array
 * could serve several statements; then it would mean one thing in one
 * statement and another in the next.) */
struct fence_params {
    struct pgarr users, fences;
};
struct existing_params {
    struct pgarr ids, users, items;
};
struct insert_params {
    struct pgarr ids, users, items, reserved_at, fences;
};
struct reject_params {
    struct pgarr ids, users, items, why, reserved_at; /* why: the reasons, a text[] */
};
struct cancel_params {
    struct pgarr lock_ids;          /* cons_cancel_lock.sql */
    struct pgarr ids, users, items; /* cons_cancel.sql */
};

/* A user of the batch: the fence its orders carry, and whether the fence
 * statement let it pass. */
struct user_fence {
    int64_t fence;
    bool passed;
};

/* Who holds an order: its buyer and item; and the end of its payment
 * window (ms) while it is pending payment, else 0. For an order id refused
 * before, the refusal it was recorded under (refused_as), else 0. */
struct order_holder {
    int64_t user, item, pay_by_ms;
    int refused_as;
};

/* Words per row of the orders already there (work.ex): order, user, item,
 * pay_by_ms, and the refusal's outcome for an order id refused before (0
 * for an order in orders). */
#define EX_WORDS 5

struct work {
    size_t cap; /* orders the arrays below hold */
    int64_t *users, *fences, *ids, *uids, *iids, *items, *rat, *fc;
    int64_t *ex; /* the orders already there: EX_WORDS words each */
    size_t nex, capex;
    size_t ncancel; /* cancels in the batch (counted by attempt, for send_first) */
    struct fence_params fence;
    struct existing_params existing;
    struct pgarr stock_items; /* peek, items: the batch's items, its cancels' too */
    struct insert_params insert;
    struct reject_params reject;
    struct cancel_params cancel;
    struct i64map fence_ok; /* user -> struct user_fence */
    struct i64map by_id;    /* order -> struct order_holder: there, or inserted by the batch */
    struct i64map by_pair;  /* (user, item) of those orders, a set */
    struct i64map stock;    /* item -> units left (int64_t) */
    struct i64map cancelled; /* order -> bool: cancelled by the batch; true once a cancel took it */
};

struct sink {
    const struct cfg *cfg;
    char appname[64];
    char idle_ms[24];
    struct pgsess sess;
    struct pgtrip trip; /* the round trip under way */
    /* Look up the orders already there before inserting: set when a batch
     * met one it had not looked up (a redelivery, a replay), cleared when a
     * lookup finds none. Live traffic is new orders: the lookup would cost
     * every order two index probes for nothing. */
    bool lookup_first;
    struct work w; /* reused: a batch allocates nothing once the first has grown it */
};

/* What sink's helpers return, one enum for all of them so that no value
 * means two things: running a trip, an attempt at the batch. sink_write
 * alone turns it into the public enum sink_status (status_of), once the
 * redos are done. */
enum step {
    STEP_OK,          /* ran, committed */
    STEP_NO_MEMORY,   /* the scratch could not grow: transient */
    STEP_TRANSIENT,   /* connection, serialization or deadlock, or not queued (pgtrip_class) */
    STEP_DATA,        /* the server refused the data (pgtrip_class) */
    STEP_ABORTED,     /* precommit said no */
    /* Two refusals of the insert that are not the data's fault; the batch is
     * rolled back and redone, knowing more (insert_redo): */
    STEP_STOCK_RACE,  /* decided on an unlocked read of the stock, refused by
                       * the stock's CHECK (a concurrent batch took the units
                       * first): redone under the item rows' lock */
    STEP_EXISTS,      /* an order was already there (unique_violation on
                       * orders): redone after looking up what is there */
};

static const struct pgsess_stmt stmts[] = {
    { "fence", embed_cons_fence, 2 },
    { "peek", embed_cons_peek, 1 },
    { "items", embed_cons_items, 1 },
    { "existing", embed_cons_existing, 3 },
    { "insert", embed_cons_insert, 5 },
    { "reject", embed_cons_reject, 5 },
    { "cancel_lock", embed_cons_cancel_lock, 1 },
    { "cancel", embed_cons_cancel, 3 },
};

static void work_free(struct work *w)
{
    struct pgarr *all[] = {
        &w->fence.users,  &w->fence.fences,
        &w->existing.ids, &w->existing.users, &w->existing.items,
        &w->stock_items,
        &w->insert.ids,   &w->insert.users,   &w->insert.items, &w->insert.reserved_at, &w->insert.fences,
        &w->reject.ids,   &w->reject.users,   &w->reject.items, &w->reject.why, &w->reject.reserved_at,
        &w->cancel.lock_ids, &w->cancel.ids,  &w->cancel.users, &w->cancel.items,
    };
    free(w->users);
    free(w->fences);
    free(w->ids);
    free(w->uids);
    free(w->iids);
    free(w->items);
    free(w->rat);
    free(w->fc);
    free(w->ex);
    for (size_t i = 0; i < ARRAY_SIZE(all); i++)
        pgarr_free(all[i]);
    i64map_free(&w->fence_ok);
    i64map_free(&w->by_id);
    i64map_free(&w->by_pair);
    i64map_free(&w->stock);
    i64map_free(&w->cancelled);
}

int sink_open(const struct cfg *c, const char *appname, struct sink **out, char *err, size_t errlen)
{
    struct sink *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->cfg = c;
    snprintf(s->appname, sizeof(s->appname), "%s", appname);
    /* The lock's lease: past it the batch could not commit anyway
     * (cons_session.sql). The worker says PostgreSQL's state (say NULL). */
    snprintf(s->idle_ms, sizeof(s->idle_ms), "%lld", (long long)c->lock.ttl_ms);
    struct pgsess_conf pc = { .appname = s->appname, .settings_sql = embed_cons_session, .nsettings = 1,
                              .settings = { s->idle_ms }, .stmts = stmts, .nstmts = ARRAY_SIZE(stmts) };
    pgsess_init(&s->sess, c, &pc);
    pgtrip_init(&s->trip, &s->sess);
    i64map_init(&s->w.fence_ok, 1, sizeof(struct user_fence));
    i64map_init(&s->w.by_id, 1, sizeof(struct order_holder));
    i64map_init(&s->w.by_pair, 2, 0);
    i64map_init(&s->w.stock, 1, sizeof(int64_t));
    i64map_init(&s->w.cancelled, 1, sizeof(bool));
    *out = s;
    return 0;
}

void sink_close(struct sink *s)
{
    if (!s)
        return;
    pgtrip_free(&s->trip);
    pgsess_close(&s->sess);
    work_free(&s->w);
    free(s);
}

int sink_ready(struct sink *s, char *err, size_t errlen)
{
    return pgsess_ready(&s->sess, err, errlen);
}

/* --- small helpers ------------------------------------------------------- */

static int grow_i64(int64_t **p, size_t n)
{
    int64_t *q = realloc(*p, n * sizeof(**p));
    if (!q)
        return -1;
    *p = q;
    return 0;
}

/* Room for a batch of n orders in w, the tables empty. 0, or -1 out of
 * memory. by_id and by_pair hold the orders already there and the batch's
 * inserts: at most 2n (one by id, one by user and item, per order) and n.
 * With that room made here, no i64map_put of an attempt fails. */
static int work_reserve(struct work *w, size_t n)
{
    if (n > w->cap) {
        int64_t **arr[] = { &w->users, &w->fences, &w->ids, &w->uids, &w->iids, &w->items, &w->rat, &w->fc };
        for (size_t i = 0; i < ARRAY_SIZE(arr); i++)
            if (grow_i64(arr[i], n) != 0)
                return -1;
        w->cap = n;
    }
    if (i64map_reset(&w->fence_ok, n) != 0 || i64map_reset(&w->by_id, 3 * n) != 0 ||
        i64map_reset(&w->by_pair, 3 * n) != 0 || i64map_reset(&w->stock, n) != 0 ||
        i64map_reset(&w->cancelled, n) != 0)
        return -1;
    return 0;
}

/* Attempts at one batch before giving up as transient: insert-first, then
 * looked up, then locked, and one more for a writer that raced the lookup. */
#define SINK_ATTEMPTS 4

/* The redo the insert's failure r calls for: STEP_EXISTS, or STEP_STOCK_RACE
 * unless the stock was read locked already (lock_items: then the refusal
 * is the data's); otherwise failed, the failure's class, stands. */
static enum step insert_redo(const PGresult *r, bool lock_items, enum step failed)
{
    const char *st = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    const char *con = PQresultErrorField(r, PG_DIAG_CONSTRAINT_NAME);
    /* order_rejections_pkey: the insert's guard, orders_not_refused (an
     * order id refused before; cons_insert.sql). */
    if (st && strcmp(st, "23505") == 0 && con &&
        (strcmp(con, "orders_pkey") == 0 || strcmp(con, "orders_one_per_user") == 0 ||
         strcmp(con, "order_rejections_pkey") == 0))
        return STEP_EXISTS;
    if (st && con && strcmp(st, "23514") == 0 && strcmp(con, "items_stock_left_range") == 0 && !lock_items)
        return STEP_STOCK_RACE;
    return failed;
}

/* Run the trip queued: STEP_OK, or the first failure's class, said in err. */
static enum step trip_run(struct sink *s, char *err, size_t errlen)
{
    switch (pgtrip_run(&s->trip, err, errlen)) {
    case PGT_OK: return STEP_OK;
    case PGT_DATA: return STEP_DATA;
    case PGT_TRANSIENT: return STEP_TRANSIENT;
    }
    return STEP_TRANSIENT; /* not reached: every status is above (-Wswitch) */
}

static enum step fail_oom(char *err, size_t errlen)
{
    snprintf(err, errlen, "out of memory");
    return STEP_NO_MEMORY;
}


/* --- the first trip: fences, what is there, the stock -------------------- */

/* The statements below are queued on s->trip; each returns its index in the
 * trip, or -1 when it could not be (the trip then fails when run). */

static bool is_cancel(const struct sink_order *so)
{
    return so->o->kind == ORDER_CANCEL;
}

/* Queue the lookup of the orders already there for any of the batch's
 * orders' keys (not its cancels': a cancel takes no id nor place). */
static int add_existing(struct sink *s, const struct sink_order *v, size_t n)
{
    struct work *w = &s->w;
    struct existing_params *e = &w->existing;
    const struct pgarr *const a[] = { &e->ids, &e->users, &e->items };
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (is_cancel(&v[i]))
            continue;
        w->ids[k] = v[i].o->order_id;
        w->uids[k] = v[i].o->user_id;
        w->iids[k] = v[i].o->item_id;
        k++;
    }
    pgarr_i64(&e->ids, w->ids, k);
    pgarr_i64(&e->users, w->uids, k);
    pgarr_i64(&e->items, w->iids, k);
    return pgtrip_arrays(&s->trip, "existing", a, 3, PGRES_TUPLES_OK);
}

/* Queue the stock of the batch's items (stock_items, set by send_first),
 * locked or not. */
static int add_stock(struct sink *s, bool lock_items)
{
    const struct pgarr *const a[] = { &s->w.stock_items };
    return pgtrip_arrays(&s->trip, lock_items ? "items" : "peek", a, 1, PGRES_TUPLES_OK);
}

/* Queue the lock of the orders the batch's cancels name (w->ncancel > 0),
 * before any item row is locked (cons_cancel_lock.sql says why). */
static int add_cancel_lock(struct sink *s, const struct sink_order *v, size_t n)
{
    struct work *w = &s->w;
    const struct pgarr *const a[] = { &w->cancel.lock_ids };
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (is_cancel(&v[i]))
            w->ids[k++] = v[i].o->order_id;
    pgarr_i64(&w->cancel.lock_ids, w->ids, k);
    return pgtrip_arrays(&s->trip, "cancel_lock", a, 1, PGRES_TUPLES_OK);
}

/* Where first_trip's answers are in the trip (-1: not asked). */
struct first_at {
    int fence, existing, stock;
};

/* Queue BEGIN; the fence of each user of the batch; when lookup, the orders
 * already there for any of the batch's orders' keys; with cancels, the lock
 * of the orders they name; and the stock of its items (its cancels' too),
 * locked or not. What is there is looked up for every order, even those of
 * users whose fence turns out stale: the statements go out before that is
 * known. */
static void send_first(struct sink *s, const struct sink_order *v, size_t n, bool lookup, bool lock_items,
                       struct first_at *at)
{
    struct work *w = &s->w;
    const struct pgarr *const a[] = { &w->fence.users, &w->fence.fences };
    size_t nu = 0, ni;

    for (size_t i = 0; i < n; i++)
        w->users[nu++] = v[i].o->user_id;
    nu = util_sort_unique_i64(w->users, nu);
    /* A user's first order gives its fence (the worker gives them all one). */
    for (size_t i = 0; i < n; i++)
        if (!i64map_has(&w->fence_ok, &v[i].o->user_id)) {
            struct user_fence *f = i64map_put(&w->fence_ok, &v[i].o->user_id);
            f->fence = v[i].fence;
        }
    for (size_t i = 0; i < nu; i++) {
        const struct user_fence *f = i64map_get(&w->fence_ok, &w->users[i]);
        w->fences[i] = f->fence;
    }
    pgtrip_sql(&s->trip, "BEGIN", PGRES_COMMAND_OK);
    pgarr_i64(&w->fence.users, w->users, nu);
    pgarr_i64(&w->fence.fences, w->fences, nu);
    at->fence = pgtrip_arrays(&s->trip, "fence", a, 2, PGRES_TUPLES_OK);
    at->existing = lookup ? add_existing(s, v, n) : -1;
    if (w->ncancel > 0)
        add_cancel_lock(s, v, n);
    for (size_t i = 0; i < n; i++)
        w->items[i] = v[i].o->item_id;
    ni = util_sort_unique_i64(w->items, n);
    pgarr_i64(&w->stock_items, w->items, ni);
    at->stock = add_stock(s, lock_items);
}

/* fence_ok: passed for the users whose fence the statement returned; the
 * others (stale) stay as send_first added them, not passed. */
static void take_fences(struct work *w, const PGresult *r)
{
    for (int i = 0; i < PQntuples(r); i++) {
        int64_t u;
        struct user_fence *f;
        if (util_parse_i64(PQgetvalue(r, i, 0), 1, INT64_MAX, &u) == 0 && (f = i64map_get(&w->fence_ok, &u)))
            f->passed = true;
    }
}

/* A column that is a bigint or NULL: its value, or 0 for NULL (or, never
 * seen, for a value out of [1, INT64_MAX]). */
static int64_t opt_i64(const PGresult *r, int row, int col)
{
    int64_t v;
    if (PQgetisnull(r, row, col) || util_parse_i64(PQgetvalue(r, row, col), 1, INT64_MAX, &v) != 0)
        return 0;
    return v;
}

/* The rows of the existing lookup into w->ex. 0, or -1 out of memory. */
static int take_existing(struct work *w, const PGresult *r)
{
    size_t rows = (size_t)PQntuples(r);
    w->nex = 0;
    if (EX_WORDS * rows > w->capex) {
        if (grow_i64(&w->ex, EX_WORDS * rows) != 0)
            return -1;
        w->capex = EX_WORDS * rows;
    }
    for (size_t i = 0; i < rows; i++) {
        int64_t *e = &w->ex[EX_WORDS * w->nex];
        if (util_parse_i64(PQgetvalue(r, (int)i, 0), 1, INT64_MAX, &e[0]) == 0 &&
            util_parse_i64(PQgetvalue(r, (int)i, 1), 1, INT64_MAX, &e[1]) == 0 &&
            util_parse_i64(PQgetvalue(r, (int)i, 2), 1, INT64_MAX, &e[2]) == 0) {
            e[3] = opt_i64(r, (int)i, 3);
            /* (order_rejections' CHECK keeps its reasons to the outcomes
             * table's: tests/unit/test_outcomes.c) */
            e[4] = PQgetisnull(r, (int)i, 4) ? 0 : cmsg_of_reason(PQgetvalue(r, (int)i, 4));
            w->nex++;
        }
    }
    return 0;
}

/* stock: item -> units left, from the peek or the locked read. */
static void take_stock(struct work *w, const PGresult *r)
{
    i64map_clear(&w->stock);
    for (int i = 0; i < PQntuples(r); i++) {
        int64_t item, left;
        /* (a row per item of the batch at most: the room work_reserve made) */
        if (util_parse_i64(PQgetvalue(r, i, 0), 1, INT64_MAX, &item) == 0 &&
            util_parse_i64(PQgetvalue(r, i, 1), 0, INT64_MAX, &left) == 0) {
            int64_t *units = i64map_put(&w->stock, &item);
            *units = left;
        }
    }
}

/* Note an order as there: by id, and by buyer and item. */
static void note_order(struct work *w, int64_t order, int64_t user, int64_t item, int64_t pay_by_ms)
{
    const int64_t pair[2] = { user, item };
    struct order_holder *h = i64map_put(&w->by_id, &order);
    *h = (struct order_holder){ user, item, pay_by_ms, 0 };
    i64map_put(&w->by_pair, pair);
}

/* Note an order id refused before: by id only (a refused order holds no
 * buyer's place). An order in orders with the same id (the id_conflict
 * case: the refusal was of another buyer's message) is noted after it and
 * wins. */
static void note_refused(struct work *w, int64_t order, int64_t user, int64_t item, int refused_as)
{
    struct order_holder *h = i64map_put(&w->by_id, &order);
    *h = (struct order_holder){ user, item, 0, refused_as };
}

/* --- deciding ------------------------------------------------------------ */

/* The outcome of one order, given what is there. An order to insert takes
 * its unit of stock and counts as existing for the later ones. An order id
 * refused before stays refused (so->refused_as says what for): a unit that
 * came back since belongs to whoever Redis sold it to. */
static int decide_one(struct work *w, struct sink_order *so)
{
    const struct order *o = so->o;
    const struct order_holder *h;
    const int64_t pair[2] = { o->user_id, o->item_id };
    int64_t *left;
    if ((h = i64map_get(&w->by_id, &o->order_id)) != NULL) {
        if (h->user != o->user_id || h->item != o->item_id)
            return CMSG_ID_CONFLICT;
        so->refused_as = h->refused_as;
        return h->refused_as ? CMSG_REFUSED_BEFORE : CMSG_DUPLICATE;
    }
    if (i64map_has(&w->by_pair, pair))
        return CMSG_DUP_BUYER;
    if ((left = i64map_get(&w->stock, &o->item_id)) == NULL)
        return CMSG_NO_ITEM;
    if (*left <= 0)
        return CMSG_NO_STOCK;
    (*left)--;
    note_order(w, o->order_id, o->user_id, o->item_id, 0); /* its window: the insert's answer */
    return CMSG_INSERTED; /* tentative: confirmed by the commit */
}

/* Each order's outcome, in arrival order (earlier orders of the batch count
 * as existing for later ones): CMSG_RETRY for a stale fence, else from what
 * is there and w->stock (consumed). *ninsert and *nreject: how many to insert
 * and to record refused. A cancel whose fence passed is CMSG_CANCEL_NOOP
 * until cons_cancel.sql says it applied; *ncancel counts them. Returns true
 * when an order was refused for want of stock or of its item: a refusal that
 * only the locked read may decide. */
static bool decide(struct work *w, struct sink_order *v, size_t n, size_t *ninsert, size_t *nreject,
                   size_t *ncancel)
{
    bool short_of_stock = false;
    i64map_clear(&w->by_id);
    i64map_clear(&w->by_pair);
    /* The refusals first, so that an order in orders of the same id wins. */
    for (size_t i = 0; i < w->nex; i++) {
        const int64_t *e = &w->ex[EX_WORDS * i];
        if (e[4])
            note_refused(w, e[0], e[1], e[2], (int)e[4]);
    }
    for (size_t i = 0; i < w->nex; i++) {
        const int64_t *e = &w->ex[EX_WORDS * i];
        if (!e[4])
            note_order(w, e[0], e[1], e[2], e[3]);
    }
    *ninsert = *nreject = *ncancel = 0;
    for (size_t i = 0; i < n; i++) {
        const struct user_fence *f = i64map_get(&w->fence_ok, &v[i].o->user_id);
        if (!f->passed) {
            v[i].outcome = CMSG_RETRY;
            continue;
        }
        if (is_cancel(&v[i])) {
            v[i].outcome = CMSG_CANCEL_NOOP;
            (*ncancel)++;
            continue;
        }
        v[i].refused_as = 0;
        v[i].outcome = decide_one(w, &v[i]);
        if (v[i].outcome == CMSG_INSERTED)
            (*ninsert)++;
        else if (cmsg_is_refusal(v[i].outcome))
            (*nreject)++;
        short_of_stock |= v[i].outcome == CMSG_NO_STOCK || v[i].outcome == CMSG_NO_ITEM;
    }
    return short_of_stock;
}

/* --- the last trip: insert, refusals, commit ----------------------------- */

static int send_insert(struct sink *s, const struct sink_order *v, size_t n)
{
    struct work *w = &s->w;
    struct insert_params *p = &w->insert;
    const struct pgarr *const a[] = { &p->ids, &p->users, &p->items, &p->reserved_at, &p->fences };
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i].outcome != CMSG_INSERTED)
            continue;
        w->ids[k] = v[i].o->order_id;
        w->uids[k] = v[i].o->user_id;
        w->iids[k] = v[i].o->item_id;
        w->rat[k] = v[i].o->reserved_at_ms;
        w->fc[k] = v[i].fence;
        k++;
    }
    pgarr_i64(&p->ids, w->ids, k);
    pgarr_i64(&p->users, w->uids, k);
    pgarr_i64(&p->items, w->iids, k);
    pgarr_i64(&p->reserved_at, w->rat, k);
    pgarr_i64(&p->fences, w->fc, k);
    return pgtrip_arrays(&s->trip, "insert", a, 5, PGRES_TUPLES_OK);
}

static int send_reject(struct sink *s, const struct sink_order *v, size_t n)
{
    struct work *w = &s->w;
    struct reject_params *p = &w->reject;
    const struct pgarr *const a[] = { &p->ids, &p->users, &p->items, &p->why, &p->reserved_at };
    size_t k = 0;
    pgarr_begin(&p->why, PGARR_TEXT);
    for (size_t i = 0; i < n; i++) {
        if (!cmsg_is_refusal(v[i].outcome))
            continue;
        const char *why = cmsg_reason(v[i].outcome);
        w->ids[k] = v[i].o->order_id;
        w->uids[k] = v[i].o->user_id;
        w->iids[k] = v[i].o->item_id;
        w->rat[k] = v[i].o->reserved_at_ms;
        pgarr_add_text(&p->why, why, strlen(why));
        k++;
    }
    pgarr_end(&p->why);
    pgarr_i64(&p->ids, w->ids, k);
    pgarr_i64(&p->users, w->uids, k);
    pgarr_i64(&p->items, w->iids, k);
    pgarr_i64(&p->reserved_at, w->rat, k);
    return pgtrip_arrays(&s->trip, "reject", a, 5, PGRES_COMMAND_OK);
}

/* The cancels whose fence passed (decide made them CMSG_CANCEL_NOOP). */
static int send_cancel(struct sink *s, const struct sink_order *v, size_t n)
{
    struct work *w = &s->w;
    struct cancel_params *p = &w->cancel;
    const struct pgarr *const a[] = { &p->ids, &p->users, &p->items };
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i].outcome != CMSG_CANCEL_NOOP)
            continue;
        w->ids[k] = v[i].o->order_id;
        w->uids[k] = v[i].o->user_id;
        w->iids[k] = v[i].o->item_id;
        k++;
    }
    pgarr_i64(&p->ids, w->ids, k);
    pgarr_i64(&p->users, w->uids, k);
    pgarr_i64(&p->items, w->iids, k);
    return pgtrip_arrays(&s->trip, "cancel", a, 3, PGRES_TUPLES_OK);
}

/* --- what the last trip answered ----------------------------------------- */

/* The insert's rows (order id, pay_by in ms: the orders pending payment)
 * into their holders in by_id. */
static void take_inserted(struct work *w, const PGresult *r)
{
    for (int i = 0; i < PQntuples(r); i++) {
        int64_t id;
        struct order_holder *h;
        if (util_parse_i64(PQgetvalue(r, i, 0), 1, INT64_MAX, &id) == 0 && (h = i64map_get(&w->by_id, &id)))
            h->pay_by_ms = opt_i64(r, i, 1);
    }
}

/* The cancel's rows (the orders it cancelled) into w->cancelled. */
static void take_cancelled(struct work *w, const PGresult *r)
{
    for (int i = 0; i < PQntuples(r); i++) {
        int64_t id;
        /* (a row per cancel of the batch at most: the room work_reserve made) */
        if (util_parse_i64(PQgetvalue(r, i, 0), 1, INT64_MAX, &id) == 0)
            i64map_put(&w->cancelled, &id);
    }
}

/* The committed batch's last word on each message: the window of each
 * order inserted or already there (none for one a cancel of the batch
 * ended: it is no longer pending), and which cancels applied (of two of
 * one order, the first). */
static void finish_outcomes(struct work *w, struct sink_order *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const struct order_holder *h;
        bool *taken;
        if (v[i].outcome == CMSG_INSERTED || v[i].outcome == CMSG_DUPLICATE) {
            h = i64map_get(&w->by_id, &v[i].o->order_id);
            if (h && !i64map_has(&w->cancelled, &v[i].o->order_id))
                v[i].pay_by_ms = h->pay_by_ms;
        } else if (v[i].outcome == CMSG_CANCEL_NOOP &&
                   (taken = i64map_get(&w->cancelled, &v[i].o->order_id)) != NULL && !*taken) {
            *taken = true;
            v[i].outcome = CMSG_CANCELLED;
        }
    }
}

/* --- the batch ----------------------------------------------------------- */

/* The first trip: BEGIN, fences, what is there (when lookup), the stock
 * (locked when lock_items); its answers taken into s->w. */
static enum step first_trip(struct sink *s, const struct sink_order *v, size_t n, bool lookup,
                            bool lock_items, char *err, size_t errlen)
{
    struct work *w = &s->w;
    struct first_at at;
    enum step st;
    send_first(s, v, n, lookup, lock_items, &at);
    if ((st = trip_run(s, err, errlen)) != STEP_OK)
        return st;
    take_fences(w, pgtrip_result(&s->trip, at.fence));
    w->nex = 0;
    if (lookup && take_existing(w, pgtrip_result(&s->trip, at.existing)) != 0)
        return fail_oom(err, errlen);
    take_stock(w, pgtrip_result(&s->trip, at.stock));
    pgtrip_reset(&s->trip);
    return STEP_OK;
}

/* Refusing needs the truth: the stock read again, locked, and the orders
 * already there (a redelivered order of a sold-out item is a duplicate, not
 * a refusal), looked up now unless they were (lookup). */
static enum step locked_trip(struct sink *s, const struct sink_order *v, size_t n, bool lookup, char *err,
                             size_t errlen)
{
    struct work *w = &s->w;
    int at_existing = lookup ? -1 : add_existing(s, v, n);
    int at_stock = add_stock(s, true);
    enum step st;
    if ((st = trip_run(s, err, errlen)) != STEP_OK)
        return st;
    if (!lookup && take_existing(w, pgtrip_result(&s->trip, at_existing)) != 0)
        return fail_oom(err, errlen);
    take_stock(w, pgtrip_result(&s->trip, at_stock));
    pgtrip_reset(&s->trip);
    return STEP_OK;
}

/* The last trip: the insert, the cancels, the refusals, COMMIT. An insert
 * refused for a reason a redo cures (insert_redo) says so instead of its
 * failure. The cancels go after the insert: a cancel sees the order its
 * batch inserted. */
static enum step last_trip(struct sink *s, const struct sink_order *v, size_t n, size_t ninsert,
                           size_t nreject, size_t ncancel, bool lock_items, char *err, size_t errlen)
{
    struct pgtrip *t = &s->trip;
    enum step st;
    int at_insert = ninsert > 0 ? send_insert(s, v, n) : -1;
    int at_cancel = ncancel > 0 ? send_cancel(s, v, n) : -1;
    if (nreject > 0)
        send_reject(s, v, n);
    int at_commit = pgtrip_sql(t, "COMMIT", PGRES_COMMAND_OK);
    if ((st = trip_run(s, err, errlen)) != STEP_OK) {
        if (at_insert >= 0 && t->failed == at_insert) /* the insert failed: why? */
            st = insert_redo(pgtrip_result(t, at_insert), lock_items, st);
        return st;
    }
    /* COMMIT in a transaction the server had already aborted answers
     * ROLLBACK, with a success status. */
    if (strcmp(PQcmdStatus(pgtrip_result(t, at_commit)), "COMMIT") != 0) {
        snprintf(err, errlen, "COMMIT: the server rolled back");
        return STEP_TRANSIENT;
    }
    if (at_insert >= 0)
        take_inserted(&s->w, pgtrip_result(t, at_insert));
    if (at_cancel >= 0)
        take_cancelled(&s->w, pgtrip_result(t, at_cancel));
    return STEP_OK;
}

/* One attempt at the batch, in one transaction and two round trips (three
 * when the stock is short):
 *   1. BEGIN, fences, what is there (when lookup), the orders the cancels
 *      name (locked), the stock: unlocked (peek), or locked (items) when
 *      lock_items (always with cancels);
 *   (short of stock: the locked read, and what is there if not looked up
 *   yet, then decide again: a refusal needs both;)
 *   2. insert, cancels, refusals, COMMIT.
 * Without the lookup every order is taken for new; the insert, which fails
 * on any order already there, proves it before anything commits. Decisions
 * within the batch (a second copy of an order, a second order of one buyer
 * for one item) stand on the orders of the batch inserted before them.
 * Whatever fails, the transaction is rolled back and nothing is written.
 * STEP_STOCK_RACE: redo with lock_items; STEP_EXISTS: redo with lookup. */
static enum step attempt(struct sink *s, struct sink_order *v, size_t n, bool lookup, bool lock_items,
                         sink_precommit_fn precommit, void *arg, struct sink_trace *tr, char *err,
                         size_t errlen)
{
    struct work *w = &s->w;
    size_t ninsert, nreject, ncancel;
    enum step st;

    if (work_reserve(w, n) != 0) {
        st = fail_oom(err, errlen);
        goto fail;
    }
    w->ncancel = 0;
    for (size_t i = 0; i < n; i++)
        w->ncancel += is_cancel(&v[i]);
    if ((st = first_trip(s, v, n, lookup, lock_items, err, errlen)) != STEP_OK)
        goto fail;
    if (decide(w, v, n, &ninsert, &nreject, &ncancel) && !(lookup && lock_items)) {
        if ((st = locked_trip(s, v, n, lookup, err, errlen)) != STEP_OK)
            goto fail;
        lookup = lock_items = true;
        decide(w, v, n, &ninsert, &nreject, &ncancel);
    }
    /* The last look at the leases before the trip that commits. Losing one
     * during that trip is what the fences (whose rows this transaction holds
     * locked until it ends) are for. */
    if (precommit && precommit(arg) != 0) {
        snprintf(err, errlen, "a lease was lost before commit");
        st = STEP_ABORTED;
        goto fail;
    }
    if ((st = last_trip(s, v, n, ninsert, nreject, ncancel, lock_items, err, errlen)) != STEP_OK)
        goto fail;
    finish_outcomes(w, v, n);
    if (lookup)
        s->lookup_first = w->nex > 0;
    tr->looked_up = lookup;
    pgtrip_reset(&s->trip);
    return STEP_OK;
fail:
    pgtrip_rollback(&s->trip);
    return st;
}

/* What sink_write answers for the step its last attempt ended in. A redo
 * still asked for after SINK_ATTEMPTS means still racing: back off, retry
 * later. */
static enum sink_status status_of(enum step st)
{
    switch (st) {
    case STEP_OK: return SINK_OK;
    case STEP_DATA: return SINK_DATA;
    case STEP_ABORTED: return SINK_ABORTED;
    case STEP_NO_MEMORY:
    case STEP_TRANSIENT:
    case STEP_STOCK_RACE:
    case STEP_EXISTS: return SINK_TRANSIENT;
    }
    return SINK_TRANSIENT; /* not reached: every step is above (-Wswitch) */
}

enum sink_status sink_write(struct sink *s, struct sink_order *v, size_t n, sink_precommit_fn precommit,
                            void *arg, struct sink_trace *trace, char *err, size_t errlen)
{
    bool lookup, lock_items = false; /* the first attempt: insert-first unless told otherwise */
    enum step st = STEP_TRANSIENT;
    struct sink_trace tr = { 0 };

    if (trace)
        *trace = tr;
    for (size_t i = 0; i < n; i++) {
        v[i].outcome = CMSG_PENDING;
        v[i].pay_by_ms = 0;
        v[i].refused_as = 0;
        /* A batch with cancels locks every item row of the batch at once,
         * in id order, after the cancels' orders (cons_cancel_lock.sql):
         * its insert and its cancel would otherwise lock items in two
         * passes, each in order but not together. */
        lock_items |= is_cancel(&v[i]);
    }
    if (n == 0)
        return SINK_OK;
    if (sink_ready(s, err, errlen) != 0)
        return SINK_TRANSIENT;
    lookup = s->lookup_first;
    for (int i = 0; i < SINK_ATTEMPTS; i++) {
        st = attempt(s, v, n, lookup, lock_items, precommit, arg, &tr, err, errlen);
        if (st == STEP_EXISTS) {
            tr.redo_existing++;
            lookup = s->lookup_first = true;
        } else if (st == STEP_STOCK_RACE) {
            tr.redo_stock++;
            lock_items = true;
        } else {
            break;
        }
    }
    if (st != STEP_OK)
        for (size_t i = 0; i < n; i++) {
            v[i].outcome = CMSG_PENDING;
            v[i].pay_by_ms = 0;
            v[i].refused_as = 0;
        }
    if (trace)
        *trace = tr;
    return status_of(st);
}
