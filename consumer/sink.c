#include "sink.h"

#include <endian.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embed.h"
#include "i64map.h"
#include "metrics.h"
#include "pgconn.h"
#include "queue.h"
#include "util.h"

/* --- per-batch scratch, kept from one batch to the next ------------------ */

/* A parameter in binary form. */
struct bytes {
    unsigned char *data;
    size_t len, cap;
    bool oom;
};

/* The binary parameters of the statements, one buffer per parameter of
 * each. (libpq copies a parameter when the statement is queued, so one
 * buffer could serve several statements; then it would mean one thing in
 * one statement and another in the next.) */
struct fence_params {
    struct bytes users, fences;
};
struct existing_params {
    struct bytes ids, users, items;
};
struct insert_params {
    struct bytes ids, users, items, reserved_at, fences;
};
struct reject_params {
    struct bytes ids, users, items, reserved_at; /* and the reasons: work.why */
};
struct cancel_params {
    struct bytes lock_ids;         /* cons_cancel_lock.sql */
    struct bytes ids, users, items; /* cons_cancel.sql */
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
    struct bytes stock_items; /* peek, items: the batch's items, its cancels' too */
    struct insert_params insert;
    struct reject_params reject;
    struct cancel_params cancel;
    struct mbuf why; /* the reasons of the refusals, a text[] literal */
    struct i64map fence_ok; /* user -> struct user_fence */
    struct i64map by_id;    /* order -> struct order_holder: there, or inserted by the batch */
    struct i64map by_pair;  /* (user, item) of those orders, a set */
    struct i64map stock;    /* item -> units left (int64_t) */
    struct i64map cancelled; /* order -> bool: cancelled by the batch; true once a cancel took it */
};

struct sink {
    const struct cfg *cfg;
    char appname[64];
    PGconn *pg;
    /* Look up the orders already there before inserting: set when a batch
     * met one it had not looked up (a redelivery, a replay), cleared when a
     * lookup finds none. Live traffic is new orders: the lookup would cost
     * every order two index probes for nothing. */
    bool lookup_first;
    struct work w; /* reused: a batch allocates nothing once the first has grown it */
};

/* What sink's helpers return, one enum for all of them so that no value
 * means two things: queueing a statement, running a trip, an attempt at the
 * batch. sink_write alone turns it into the public enum sink_status
 * (status_of), once the redos are done. */
enum step {
    STEP_OK,          /* queued, ran, committed */
    STEP_NO_MEMORY,   /* a statement's parameters or the scratch could not grow: transient */
    STEP_NOT_QUEUED,  /* libpq refused to queue a statement (the connection is unusable): transient */
    STEP_TRANSIENT,   /* connection, serialization or deadlock (classify) */
    STEP_DATA,        /* the server refused the data (classify) */
    STEP_ABORTED,     /* precommit said no */
    /* Two refusals of the insert that are not the data's fault; the batch is
     * rolled back and redone, knowing more (insert_redo): */
    STEP_STOCK_RACE,  /* decided on an unlocked read of the stock, refused by
                       * the stock's CHECK (a concurrent batch took the units
                       * first): redone under the item rows' lock */
    STEP_EXISTS,      /* an order was already there (unique_violation on
                       * orders): redone after looking up what is there */
};

static const struct {
    const char *name;
    const char *sql;
    int nparams;
} stmts[] = {
    { "fence", embed_cons_fence, 2 },
    { "peek", embed_cons_peek, 1 },
    { "items", embed_cons_items, 1 },
    { "existing", embed_cons_existing, 3 },
    { "insert", embed_cons_insert, 5 },
    { "reject", embed_cons_reject, 5 },
    { "cancel_lock", embed_cons_cancel_lock, 1 },
    { "cancel", embed_cons_cancel, 3 },
};

static void set_err(char *err, size_t errlen, const char *what, PGconn *pg, const PGresult *res)
{
    const char *m = res ? PQresultErrorMessage(res) : PQerrorMessage(pg);
    size_t n = strlen(m);
    while (n && (m[n - 1] == '\n' || m[n - 1] == ' '))
        n--;
    snprintf(err, errlen, "%s: %.*s", what, (int)n, m);
    /* libpq's messages span lines; a log line must not */
    for (char *c = err; *c; c++)
        if (*c == '\n' || *c == '\t')
            *c = ' ';
}

static void drop_conn(struct sink *s)
{
    if (s->pg)
        PQfinish(s->pg);
    s->pg = NULL;
}

static int sink_connect(struct sink *s, char *err, size_t errlen)
{
    char idle[24];
    if (pgconn_open(s->cfg, s->appname, &s->pg, err, errlen) != 0)
        return -1;
    /* The lock's lease: past it the batch could not commit anyway. */
    snprintf(idle, sizeof(idle), "%lld", (long long)s->cfg->lock.ttl_ms);
    const char *p1[] = { idle };
    PGresult *sr = PQexecParams(s->pg, embed_cons_session, 1, NULL, p1, NULL, NULL, 0);
    if (PQresultStatus(sr) != PGRES_TUPLES_OK) {
        set_err(err, errlen, "session settings", s->pg, sr);
        PQclear(sr);
        goto fail;
    }
    PQclear(sr);
    for (size_t i = 0; i < ARRAY_SIZE(stmts); i++) {
        PGresult *r = PQprepare(s->pg, stmts[i].name, stmts[i].sql, stmts[i].nparams, NULL);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            set_err(err, errlen, stmts[i].name, s->pg, r);
            PQclear(r);
            goto fail;
        }
        PQclear(r);
    }
    /* From here on every statement is sent pipelined (sink_write). */
    if (!PQenterPipelineMode(s->pg)) {
        set_err(err, errlen, "pipeline mode", s->pg, NULL);
        goto fail;
    }
    return 0;
fail:
    drop_conn(s);
    return -1;
}

static void bytes_free(struct bytes *b)
{
    free(b->data);
}

static void work_free(struct work *w)
{
    struct bytes *all[] = {
        &w->fence.users,  &w->fence.fences,
        &w->existing.ids, &w->existing.users, &w->existing.items,
        &w->stock_items,
        &w->insert.ids,   &w->insert.users,   &w->insert.items, &w->insert.reserved_at, &w->insert.fences,
        &w->reject.ids,   &w->reject.users,   &w->reject.items, &w->reject.reserved_at,
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
        bytes_free(all[i]);
    mbuf_free(&w->why);
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
    drop_conn(s);
    work_free(&s->w);
    free(s);
}

int sink_ready(struct sink *s, char *err, size_t errlen)
{
    if (s->pg && PQstatus(s->pg) == CONNECTION_OK)
        return 0;
    drop_conn(s);
    return sink_connect(s, err, errlen);
}

/* --- small helpers ------------------------------------------------------- */

static void bytes_put(struct bytes *b, const void *p, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        unsigned char *d = realloc(b->data, cap);
        if (!d) {
            b->oom = true;
            return;
        }
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

static void bytes_put32(struct bytes *b, uint32_t v)
{
    v = htobe32(v);
    bytes_put(b, &v, sizeof(v));
}

/* int8 in pg_type (catalog/pg_type_d.h is a server header). */
#define SINK_INT8_OID 20

/* A bigint[] parameter in PostgreSQL's binary array format (array_send:
 * dimensions, a no-nulls flag, the element type, then length and lower bound
 * per dimension, then each element as its length and its big-endian value).
 * A batch sends thousands of ids: in binary the server copies them instead of
 * parsing decimal text, and the consumer formats none. */
static void arr_i64(struct bytes *b, const int64_t *v, size_t n)
{
    b->len = 0;
    b->oom = false;
    bytes_put32(b, n ? 1 : 0);
    bytes_put32(b, 0);
    bytes_put32(b, SINK_INT8_OID);
    if (n) {
        bytes_put32(b, (uint32_t)n);
        bytes_put32(b, 1);
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t x = htobe64((uint64_t)v[i]);
        bytes_put32(b, sizeof(x));
        bytes_put(b, &x, sizeof(x));
    }
}

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

static bool transient_state(const char *st)
{
    /* 08 connection, 40001 serialization, 40P01 deadlock, 57P0x shutdown or
     * not accepting connections yet, 53 out of resources, 55P03 lock timeout. */
    return st == NULL || strncmp(st, "08", 2) == 0 || strcmp(st, "40001") == 0 ||
           strcmp(st, "40P01") == 0 || strncmp(st, "57P", 3) == 0 || strncmp(st, "53", 2) == 0 ||
           strcmp(st, "55P03") == 0;
}

/* Why a statement failed: STEP_TRANSIENT or STEP_DATA. */
static enum step classify(struct sink *s, const PGresult *r)
{
    if (PQstatus(s->pg) != CONNECTION_OK)
        return STEP_TRANSIENT;
    return transient_state(r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL) ? STEP_TRANSIENT : STEP_DATA;
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

/* --- pipelined round trips ----------------------------------------------- */

/* The statements of one round trip: sent one after the other without
 * waiting, then a sync, then all the results are read. The most: BEGIN,
 * fence, existing, cancel_lock, stock. */
#define TRIP_MAX 5

struct trip {
    int n;
    const char *name[TRIP_MAX];
    ExecStatusType want[TRIP_MAX];
    PGresult *r[TRIP_MAX];
    bool synced; /* the sync went out: the server answers every statement */
    int failed;  /* the statement that failed first, or -1 */
};

static void trip_clear(struct trip *t)
{
    for (int i = 0; i < t->n; i++)
        PQclear(t->r[i]);
    memset(t, 0, sizeof(*t));
}

/* Queue a prepared statement (name) or, with nparams < 0, a constant one
 * (sql). Parameters are bigint[] in binary, except the ones fmts says are
 * text. STEP_OK, or STEP_NOT_QUEUED when libpq refused. */
static enum step trip_add(struct sink *s, struct trip *t, const char *name, int nparams,
                          const char *const *vals, const int *lens, const int *fmts, ExecStatusType want)
{
    int ok = nparams < 0 ? PQsendQueryParams(s->pg, name, 0, NULL, NULL, NULL, NULL, 0)
                         : PQsendQueryPrepared(s->pg, name, nparams, vals, lens, fmts, 0);
    if (!ok)
        return STEP_NOT_QUEUED;
    t->name[t->n] = name;
    t->want[t->n] = want;
    t->r[t->n++] = NULL;
    return STEP_OK;
}

/* Send the sync and read every result of the trip. STEP_OK when each
 * statement got its wanted status. Otherwise why (classify), and err says
 * which statement: the first one that failed (the ones after it, skipped
 * by the server, come back PGRES_PIPELINE_ABORTED); a connection lost or a
 * reply out of step drops the connection (STEP_TRANSIENT; the server rolls
 * back). */
static enum step trip_run(struct sink *s, struct trip *t, char *err, size_t errlen)
{
    enum step status = STEP_OK;
    PGresult *r;
    t->failed = -1;
    t->synced = true;
    if (!PQpipelineSync(s->pg))
        goto broken;
    for (int i = 0; i < t->n; i++) {
        if ((t->r[i] = PQgetResult(s->pg)) == NULL)
            goto broken;
        if ((r = PQgetResult(s->pg)) != NULL) { /* one result per statement, then NULL */
            PQclear(r);
            goto broken;
        }
        if (t->failed < 0 && PQresultStatus(t->r[i]) != t->want[i]) {
            t->failed = i;
            set_err(err, errlen, t->name[i], s->pg, t->r[i]);
            status = classify(s, t->r[i]);
        }
    }
    r = PQgetResult(s->pg);
    if (PQresultStatus(r) != PGRES_PIPELINE_SYNC) {
        PQclear(r);
        goto broken;
    }
    PQclear(r);
    if (t->failed >= 0 && PQstatus(s->pg) != CONNECTION_OK)
        goto broken_logged;
    return status;
broken:
    set_err(err, errlen, "pipeline", s->pg, NULL);
broken_logged:
    drop_conn(s);
    return STEP_TRANSIENT;
}

/* After a failure: end the transaction if one is open (aborted or not).
 * A connection that cannot even roll back is dropped (the server rolls back
 * when it goes). */
static void rollback(struct sink *s)
{
    struct trip t = { 0 };
    char e[8];
    if (!s->pg || PQtransactionStatus(s->pg) == PQTRANS_IDLE)
        return;
    if (trip_add(s, &t, "ROLLBACK", -1, NULL, NULL, NULL, PGRES_COMMAND_OK) != STEP_OK ||
        trip_run(s, &t, e, sizeof(e)) != STEP_OK)
        drop_conn(s);
    trip_clear(&t);
}

static enum step fail_oom(char *err, size_t errlen)
{
    snprintf(err, errlen, "out of memory");
    return STEP_NO_MEMORY;
}

/* A statement that could not be queued (st: STEP_NO_MEMORY or
 * STEP_NOT_QUEUED), said in err. Returns st. */
static enum step not_queued(struct sink *s, enum step st, char *err, size_t errlen)
{
    if (st == STEP_NO_MEMORY)
        return fail_oom(err, errlen);
    set_err(err, errlen, "pipeline", s->pg, NULL);
    return st;
}

/* The values and lengths for libpq of the binary parameters b[0..k); a
 * NULL b[i] is a text parameter, the caller's to set. false when one of
 * them could not grow. */
static bool params(const struct bytes *const *b, size_t k, const char **vals, int *lens)
{
    for (size_t i = 0; i < k; i++) {
        if (!b[i])
            continue;
        if (b[i]->oom)
            return false;
        vals[i] = (const char *)b[i]->data;
        lens[i] = (int)b[i]->len;
    }
    return true;
}

static const int bin5[5] = { 1, 1, 1, 1, 1 };

/* --- the first trip: fences, what is there, the stock -------------------- */

static bool is_cancel(const struct sink_order *so)
{
    return so->o->kind == ORDER_CANCEL;
}

/* Queue the lookup of the orders already there for any of the batch's
 * orders' keys (not its cancels': a cancel takes no id nor place). */
static enum step add_existing(struct sink *s, struct trip *t, const struct sink_order *v, size_t n)
{
    struct work *w = &s->w;
    struct existing_params *e = &w->existing;
    const struct bytes *const b[] = { &e->ids, &e->users, &e->items };
    const char *vals[3];
    int lens[3];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (is_cancel(&v[i]))
            continue;
        w->ids[k] = v[i].o->order_id;
        w->uids[k] = v[i].o->user_id;
        w->iids[k] = v[i].o->item_id;
        k++;
    }
    arr_i64(&e->ids, w->ids, k);
    arr_i64(&e->users, w->uids, k);
    arr_i64(&e->items, w->iids, k);
    if (!params(b, 3, vals, lens))
        return STEP_NO_MEMORY;
    return trip_add(s, t, "existing", 3, vals, lens, bin5, PGRES_TUPLES_OK);
}

/* Queue the stock of the batch's items (stock_items, set by send_first),
 * locked or not. */
static enum step add_stock(struct sink *s, struct trip *t, bool lock_items)
{
    const char *vals[1] = { (const char *)s->w.stock_items.data };
    int lens[1] = { (int)s->w.stock_items.len };
    return trip_add(s, t, lock_items ? "items" : "peek", 1, vals, lens, bin5, PGRES_TUPLES_OK);
}

/* Queue the lock of the orders the batch's cancels name (w->ncancel > 0),
 * before any item row is locked (cons_cancel_lock.sql says why). */
static enum step add_cancel_lock(struct sink *s, struct trip *t, const struct sink_order *v, size_t n)
{
    struct work *w = &s->w;
    const char *vals[1];
    int lens[1];
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (is_cancel(&v[i]))
            w->ids[k++] = v[i].o->order_id;
    arr_i64(&w->cancel.lock_ids, w->ids, k);
    if (w->cancel.lock_ids.oom)
        return STEP_NO_MEMORY;
    vals[0] = (const char *)w->cancel.lock_ids.data;
    lens[0] = (int)w->cancel.lock_ids.len;
    return trip_add(s, t, "cancel_lock", 1, vals, lens, bin5, PGRES_TUPLES_OK);
}

/* Queue BEGIN; the fence of each user of the batch; when lookup, the orders
 * already there for any of the batch's orders' keys; with cancels, the lock
 * of the orders they name; and the stock of its items (its cancels' too),
 * locked or not. What is there is looked up for every order, even those of
 * users whose fence turns out stale: the statements go out before that is
 * known. */
static enum step send_first(struct sink *s, struct trip *t, const struct sink_order *v, size_t n, bool lookup,
                            bool lock_items)
{
    struct work *w = &s->w;
    const struct bytes *const b[] = { &w->fence.users, &w->fence.fences };
    const char *vals[2];
    int lens[2];
    size_t nu = 0, ni;
    enum step q;

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
    if ((q = trip_add(s, t, "BEGIN", -1, NULL, NULL, NULL, PGRES_COMMAND_OK)) != STEP_OK)
        return q;
    arr_i64(&w->fence.users, w->users, nu);
    arr_i64(&w->fence.fences, w->fences, nu);
    if (!params(b, 2, vals, lens))
        return STEP_NO_MEMORY;
    if ((q = trip_add(s, t, "fence", 2, vals, lens, bin5, PGRES_TUPLES_OK)) != STEP_OK)
        return q;
    if (lookup && (q = add_existing(s, t, v, n)) != STEP_OK)
        return q;
    if (w->ncancel > 0 && (q = add_cancel_lock(s, t, v, n)) != STEP_OK)
        return q;
    for (size_t i = 0; i < n; i++)
        w->items[i] = v[i].o->item_id;
    ni = util_sort_unique_i64(w->items, n);
    arr_i64(&w->stock_items, w->items, ni);
    if (w->stock_items.oom)
        return STEP_NO_MEMORY;
    return add_stock(s, t, lock_items);
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

static enum step send_insert(struct sink *s, struct trip *t, const struct sink_order *v, size_t n)
{
    struct work *w = &s->w;
    struct insert_params *p = &w->insert;
    const struct bytes *const b[] = { &p->ids, &p->users, &p->items, &p->reserved_at, &p->fences };
    const char *vals[5];
    int lens[5];
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
    arr_i64(&p->ids, w->ids, k);
    arr_i64(&p->users, w->uids, k);
    arr_i64(&p->items, w->iids, k);
    arr_i64(&p->reserved_at, w->rat, k);
    arr_i64(&p->fences, w->fc, k);
    if (!params(b, 5, vals, lens))
        return STEP_NO_MEMORY;
    return trip_add(s, t, "insert", 5, vals, lens, bin5, PGRES_TUPLES_OK);
}

static enum step send_reject(struct sink *s, struct trip *t, const struct sink_order *v, size_t n)
{
    static const int fmts[5] = { 1, 1, 1, 0, 1 }; /* the reasons go as a text[] literal */
    struct work *w = &s->w;
    struct reject_params *p = &w->reject;
    const struct bytes *const b[] = { &p->ids, &p->users, &p->items, NULL, &p->reserved_at };
    const char *vals[5];
    int lens[5];
    size_t k = 0;
    w->why.len = 0;
    mbuf_printf(&w->why, "{");
    for (size_t i = 0; i < n; i++) {
        if (!cmsg_is_refusal(v[i].outcome))
            continue;
        w->ids[k] = v[i].o->order_id;
        w->uids[k] = v[i].o->user_id;
        w->iids[k] = v[i].o->item_id;
        w->rat[k] = v[i].o->reserved_at_ms;
        mbuf_printf(&w->why, k ? ",%s" : "%s", cmsg_reason(v[i].outcome));
        k++;
    }
    mbuf_printf(&w->why, "}");
    arr_i64(&p->ids, w->ids, k);
    arr_i64(&p->users, w->uids, k);
    arr_i64(&p->items, w->iids, k);
    arr_i64(&p->reserved_at, w->rat, k);
    if (!params(b, 5, vals, lens) || w->why.oom || !w->why.data)
        return STEP_NO_MEMORY;
    vals[3] = w->why.data;
    lens[3] = 0;
    return trip_add(s, t, "reject", 5, vals, lens, fmts, PGRES_COMMAND_OK);
}

/* The cancels whose fence passed (decide made them CMSG_CANCEL_NOOP). */
static enum step send_cancel(struct sink *s, struct trip *t, const struct sink_order *v, size_t n)
{
    struct work *w = &s->w;
    struct cancel_params *p = &w->cancel;
    const struct bytes *const b[] = { &p->ids, &p->users, &p->items };
    const char *vals[3];
    int lens[3];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i].outcome != CMSG_CANCEL_NOOP)
            continue;
        w->ids[k] = v[i].o->order_id;
        w->uids[k] = v[i].o->user_id;
        w->iids[k] = v[i].o->item_id;
        k++;
    }
    arr_i64(&p->ids, w->ids, k);
    arr_i64(&p->users, w->uids, k);
    arr_i64(&p->items, w->iids, k);
    if (!params(b, 3, vals, lens))
        return STEP_NO_MEMORY;
    return trip_add(s, t, "cancel", 3, vals, lens, bin5, PGRES_TUPLES_OK);
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
static enum step first_trip(struct sink *s, struct trip *t, const struct sink_order *v, size_t n, bool lookup,
                            bool lock_items, char *err, size_t errlen)
{
    struct work *w = &s->w;
    enum step st;
    if ((st = send_first(s, t, v, n, lookup, lock_items)) != STEP_OK)
        return not_queued(s, st, err, errlen);
    if ((st = trip_run(s, t, err, errlen)) != STEP_OK)
        return st;
    take_fences(w, t->r[1]);
    w->nex = 0;
    if (lookup && take_existing(w, t->r[2]) != 0)
        return fail_oom(err, errlen);
    take_stock(w, t->r[t->n - 1]);
    trip_clear(t);
    return STEP_OK;
}

/* Refusing needs the truth: the stock read again, locked, and the orders
 * already there (a redelivered order of a sold-out item is a duplicate, not
 * a refusal), looked up now unless they were (lookup). */
static enum step locked_trip(struct sink *s, struct trip *t, const struct sink_order *v, size_t n,
                             bool lookup, char *err, size_t errlen)
{
    struct work *w = &s->w;
    enum step st = lookup ? STEP_OK : add_existing(s, t, v, n);
    if (st == STEP_OK)
        st = add_stock(s, t, true);
    if (st != STEP_OK)
        return not_queued(s, st, err, errlen);
    if ((st = trip_run(s, t, err, errlen)) != STEP_OK)
        return st;
    if (!lookup && take_existing(w, t->r[0]) != 0)
        return fail_oom(err, errlen);
    take_stock(w, t->r[t->n - 1]);
    trip_clear(t);
    return STEP_OK;
}

/* The last trip: the insert, the cancels, the refusals, COMMIT. An insert
 * refused for a reason a redo cures (insert_redo) says so instead of its
 * failure. The cancels go after the insert: a cancel sees the order its
 * batch inserted. */
static enum step last_trip(struct sink *s, struct trip *t, const struct sink_order *v, size_t n,
                           size_t ninsert, size_t nreject, size_t ncancel, bool lock_items, char *err,
                           size_t errlen)
{
    enum step st = STEP_OK;
    int at_insert = -1, at_cancel = -1;
    if (ninsert > 0) {
        at_insert = t->n;
        st = send_insert(s, t, v, n);
    }
    if (st == STEP_OK && ncancel > 0) {
        at_cancel = t->n;
        st = send_cancel(s, t, v, n);
    }
    if (st == STEP_OK && nreject > 0)
        st = send_reject(s, t, v, n);
    if (st == STEP_OK)
        st = trip_add(s, t, "COMMIT", -1, NULL, NULL, NULL, PGRES_COMMAND_OK);
    if (st != STEP_OK)
        return not_queued(s, st, err, errlen);
    if ((st = trip_run(s, t, err, errlen)) != STEP_OK) {
        if (ninsert > 0 && t->failed == 0) /* the insert went first */
            st = insert_redo(t->r[0], lock_items, st);
        return st;
    }
    /* COMMIT in a transaction the server had already aborted answers
     * ROLLBACK, with a success status. */
    if (strcmp(PQcmdStatus(t->r[t->n - 1]), "COMMIT") != 0) {
        snprintf(err, errlen, "COMMIT: the server rolled back");
        return STEP_TRANSIENT;
    }
    if (at_insert >= 0)
        take_inserted(&s->w, t->r[at_insert]);
    if (at_cancel >= 0)
        take_cancelled(&s->w, t->r[at_cancel]);
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
    struct trip t = { 0 };
    size_t ninsert, nreject, ncancel;
    enum step st;

    if (work_reserve(w, n) != 0) {
        st = fail_oom(err, errlen);
        goto fail;
    }
    w->ncancel = 0;
    for (size_t i = 0; i < n; i++)
        w->ncancel += is_cancel(&v[i]);
    if ((st = first_trip(s, &t, v, n, lookup, lock_items, err, errlen)) != STEP_OK)
        goto fail;
    if (decide(w, v, n, &ninsert, &nreject, &ncancel) && !(lookup && lock_items)) {
        if ((st = locked_trip(s, &t, v, n, lookup, err, errlen)) != STEP_OK)
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
    if ((st = last_trip(s, &t, v, n, ninsert, nreject, ncancel, lock_items, err, errlen)) != STEP_OK)
        goto fail;
    finish_outcomes(w, v, n);
    if (lookup)
        s->lookup_first = w->nex > 0;
    tr->looked_up = lookup;
    trip_clear(&t);
    return STEP_OK;
fail:
    /* Statements queued without their sync (out of memory half-way, libpq
     * refusing one) leave the pipeline out of step: drop the connection
     * rather than guess; the server rolls back. */
    if (t.n > 0 && !t.synced)
        drop_conn(s);
    trip_clear(&t);
    rollback(s);
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
    case STEP_NOT_QUEUED:
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
