#include "sink.h"

#include <inttypes.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embed.h"
#include "metrics.h"
#include "pgconn.h"
#include "queue.h"
#include "util.h"

struct sink {
    const struct cfg *cfg;
    char appname[64];
    PGconn *pg;
};

static const struct {
    const char *name;
    const char *sql;
    int nparams;
} stmts[] = {
    { "fence", embed_cons_fence, 2 },
    { "items", embed_cons_items, 1 },
    { "existing", embed_cons_existing, 3 },
    { "insert", embed_cons_insert, 5 },
    { "reject", embed_cons_reject, 5 },
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
    return 0;
fail:
    PQfinish(s->pg);
    s->pg = NULL;
    return -1;
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
    if (sink_connect(s, err, errlen) != 0) {
        free(s);
        return -1;
    }
    *out = s;
    return 0;
}

void sink_close(struct sink *s)
{
    if (!s)
        return;
    if (s->pg)
        PQfinish(s->pg);
    free(s);
}

/* Reconnect if the connection is gone. 0 when usable. */
static int sink_ensure(struct sink *s, char *err, size_t errlen)
{
    if (s->pg && PQstatus(s->pg) == CONNECTION_OK)
        return 0;
    if (s->pg)
        PQfinish(s->pg);
    s->pg = NULL;
    return sink_connect(s, err, errlen);
}

/* --- small helpers ------------------------------------------------------- */

/* PostgreSQL array literal of integers (a parameter value, never SQL text). */
static void arr_i64(struct mbuf *b, const int64_t *v, size_t n)
{
    mbuf_printf(b, "{");
    for (size_t i = 0; i < n; i++)
        mbuf_printf(b, i ? ",%" PRId64 : "%" PRId64, v[i]);
    mbuf_printf(b, "}");
}

/* Open-addressing set of (a, b) pairs with a value; a > 0 always (ids). */
struct pset {
    int64_t *a, *b, *val;
    size_t cap;
};

static int pset_init(struct pset *s, size_t n)
{
    size_t cap = 16;
    while (cap < n * 2 + 2)
        cap *= 2;
    s->cap = cap;
    s->a = calloc(cap, sizeof(int64_t));
    s->b = calloc(cap, sizeof(int64_t));
    s->val = calloc(cap, sizeof(int64_t));
    return s->a && s->b && s->val ? 0 : -1;
}

static void pset_free(struct pset *s)
{
    free(s->a);
    free(s->b);
    free(s->val);
}

static size_t pset_slot(const struct pset *s, int64_t a, int64_t b)
{
    uint64_t h = (uint64_t)a * 0x9E3779B97F4A7C15ull ^ ((uint64_t)b + 0x632BE59BD9B4E019ull) * 0xC2B2AE3D27D4EB4Full;
    size_t i = (size_t)(h ^ (h >> 29)) & (s->cap - 1);
    while (s->a[i] != 0 && (s->a[i] != a || s->b[i] != b))
        i = (i + 1) & (s->cap - 1);
    return i;
}

/* Pointer to the value of (a, b), or NULL. */
static int64_t *pset_get(const struct pset *s, int64_t a, int64_t b)
{
    size_t i = pset_slot(s, a, b);
    return s->a[i] ? &s->val[i] : NULL;
}

static void pset_put(struct pset *s, int64_t a, int64_t b, int64_t v)
{
    size_t i = pset_slot(s, a, b);
    s->a[i] = a;
    s->b[i] = b;
    s->val[i] = v;
}

static int cmp_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return a < b ? -1 : a > b;
}

static size_t uniq_sorted(int64_t *v, size_t n)
{
    size_t k = 0;
    qsort(v, n, sizeof(*v), cmp_i64);
    for (size_t i = 0; i < n; i++)
        if (k == 0 || v[k - 1] != v[i])
            v[k++] = v[i];
    return k;
}

static bool transient_state(const char *st)
{
    /* 08 connection, 40001 serialization, 40P01 deadlock, 57P0x shutdown or
     * not accepting connections yet, 53 out of resources, 55P03 lock timeout. */
    return st == NULL || strncmp(st, "08", 2) == 0 || strcmp(st, "40001") == 0 ||
           strcmp(st, "40P01") == 0 || strncmp(st, "57P", 3) == 0 || strncmp(st, "53", 2) == 0 ||
           strcmp(st, "55P03") == 0;
}

static int classify(struct sink *s, PGresult *r)
{
    if (PQstatus(s->pg) != CONNECTION_OK)
        return SINK_TRANSIENT;
    return transient_state(r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL) ? SINK_TRANSIENT
                                                                               : SINK_DATA;
}

/* Run a prepared statement; on failure returns its status and NULL. */
static PGresult *run(struct sink *s, const char *name, int n, const char *const *params, ExecStatusType want,
                     int *status, char *err, size_t errlen)
{
    PGresult *r = PQexecPrepared(s->pg, name, n, params, NULL, NULL, 0);
    if (PQresultStatus(r) == want)
        return r;
    set_err(err, errlen, name, s->pg, r);
    *status = classify(s, r);
    PQclear(r);
    return NULL;
}

static int plain(struct sink *s, const char *sql, char *err, size_t errlen)
{
    PGresult *r = PQexec(s->pg, sql);
    int st = SINK_OK;
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        set_err(err, errlen, sql, s->pg, r);
        st = classify(s, r);
    }
    PQclear(r);
    return st;
}

/* Out of memory for a statement's parameters: retry the batch later. */
static int fail_oom(int *status, char *err, size_t errlen)
{
    snprintf(err, errlen, "out of memory");
    *status = SINK_TRANSIENT;
    return -1;
}

/* --- the transaction ----------------------------------------------------- */

struct work {
    int64_t *users, *fences, *ids, *uids, *iids, *items, *rat, *fc;
    struct mbuf p[5];
    struct pset fence_ok, by_id, by_pair, stock;
};

static void work_free(struct work *w)
{
    free(w->users);
    free(w->fences);
    free(w->ids);
    free(w->uids);
    free(w->iids);
    free(w->items);
    free(w->rat);
    free(w->fc);
    for (size_t i = 0; i < ARRAY_SIZE(w->p); i++)
        mbuf_free(&w->p[i]);
    pset_free(&w->fence_ok);
    pset_free(&w->by_id);
    pset_free(&w->by_pair);
    pset_free(&w->stock);
}

static void params_reset(struct work *w)
{
    for (size_t i = 0; i < ARRAY_SIZE(w->p); i++)
        w->p[i].len = 0;
}

static bool params_oom(const struct work *w, size_t k)
{
    for (size_t i = 0; i < k; i++)
        if (w->p[i].oom || w->p[i].data == NULL)
            return true;
    return false;
}

/* Advance the fence of each user of the batch, in user order; fence_ok then
 * holds 1 for the users that may write, 0 for those whose fence is stale. */
static int check_fences(struct sink *s, struct work *w, const struct sink_order *v, size_t n, int *status,
                        char *err, size_t errlen)
{
    PGresult *r;
    size_t nu = 0;
    const char *pp[2];

    for (size_t i = 0; i < n; i++)
        w->users[nu++] = v[i].o->user_id;
    nu = uniq_sorted(w->users, nu);
    for (size_t i = 0; i < n; i++) {
        int64_t *f = pset_get(&w->fence_ok, v[i].o->user_id, 0);
        if (!f)
            pset_put(&w->fence_ok, v[i].o->user_id, 0, v[i].fence);
    }
    for (size_t i = 0; i < nu; i++)
        w->fences[i] = *pset_get(&w->fence_ok, w->users[i], 0);
    params_reset(w);
    arr_i64(&w->p[0], w->users, nu);
    arr_i64(&w->p[1], w->fences, nu);
    if (params_oom(w, 2))
        return fail_oom(status, err, errlen);
    pp[0] = w->p[0].data;
    pp[1] = w->p[1].data;
    if (!(r = run(s, "fence", 2, pp, PGRES_TUPLES_OK, status, err, errlen)))
        return -1;
    for (size_t i = 0; i < nu; i++)
        *pset_get(&w->fence_ok, w->users[i], 0) = 0;
    for (int i = 0; i < PQntuples(r); i++) {
        int64_t u;
        if (util_parse_i64(PQgetvalue(r, i, 0), 1, INT64_MAX, &u) == 0 && pset_get(&w->fence_ok, u, 0))
            *pset_get(&w->fence_ok, u, 0) = 1;
    }
    PQclear(r);
    return 0;
}

/* Mark the orders of stale fences CMSG_RETRY, the others CMSG_PENDING, and
 * gather the pending ones' items (w->items, *nitems) and keys (w->ids,
 * w->uids, w->iids). Returns how many are pending. */
static size_t gather_open(struct work *w, struct sink_order *v, size_t n, size_t *nitems)
{
    size_t ni = 0, k = 0;
    for (size_t i = 0; i < n; i++) {
        v[i].outcome = *pset_get(&w->fence_ok, v[i].o->user_id, 0) ? CMSG_PENDING : CMSG_RETRY;
        if (v[i].outcome == CMSG_RETRY)
            continue;
        w->items[ni++] = v[i].o->item_id;
        w->ids[k] = v[i].o->order_id;
        w->uids[k] = v[i].o->user_id;
        w->iids[k] = v[i].o->item_id;
        k++;
    }
    *nitems = ni;
    return k;
}

/* Lock the item rows of w->items[0..ni) in id order; stock: item -> left. */
static int load_stock(struct sink *s, struct work *w, size_t ni, int *status, char *err, size_t errlen)
{
    PGresult *r;
    const char *pp[1];
    ni = uniq_sorted(w->items, ni);
    params_reset(w);
    arr_i64(&w->p[0], w->items, ni);
    if (params_oom(w, 1))
        return fail_oom(status, err, errlen);
    pp[0] = w->p[0].data;
    if (!(r = run(s, "items", 1, pp, PGRES_TUPLES_OK, status, err, errlen)))
        return -1;
    for (int i = 0; i < PQntuples(r); i++) {
        int64_t item, left;
        if (util_parse_i64(PQgetvalue(r, i, 0), 1, INT64_MAX, &item) == 0 &&
            util_parse_i64(PQgetvalue(r, i, 1), 0, INT64_MAX, &left) == 0)
            pset_put(&w->stock, item, 0, left);
    }
    PQclear(r);
    return 0;
}

/* The orders already there for the k keys gathered: by_id: order_id ->
 * user, with the item at (order_id, -1); by_pair: (user, item) -> order_id. */
static int load_existing(struct sink *s, struct work *w, size_t k, int *status, char *err, size_t errlen)
{
    PGresult *r;
    const char *pp[3];
    params_reset(w);
    arr_i64(&w->p[0], w->ids, k);
    arr_i64(&w->p[1], w->uids, k);
    arr_i64(&w->p[2], w->iids, k);
    if (params_oom(w, 3))
        return fail_oom(status, err, errlen);
    for (int i = 0; i < 3; i++)
        pp[i] = w->p[i].data;
    if (!(r = run(s, "existing", 3, pp, PGRES_TUPLES_OK, status, err, errlen)))
        return -1;
    for (int i = 0; i < PQntuples(r); i++) {
        int64_t o, u, it;
        if (util_parse_i64(PQgetvalue(r, i, 0), 1, INT64_MAX, &o) != 0 ||
            util_parse_i64(PQgetvalue(r, i, 1), 1, INT64_MAX, &u) != 0 ||
            util_parse_i64(PQgetvalue(r, i, 2), 1, INT64_MAX, &it) != 0)
            continue;
        pset_put(&w->by_id, o, 0, u);
        pset_put(&w->by_id, o, -1, it);
        pset_put(&w->by_pair, u, it, o);
    }
    PQclear(r);
    return 0;
}

/* The outcome of one pending order, given what is there. An order to insert
 * takes its unit of stock and counts as existing for the later ones. */
static int decide_one(struct work *w, const struct order *o)
{
    int64_t *eu, *ei, *left;
    if ((eu = pset_get(&w->by_id, o->order_id, 0)) != NULL) {
        ei = pset_get(&w->by_id, o->order_id, -1);
        return *eu == o->user_id && ei && *ei == o->item_id ? CMSG_DUPLICATE : CMSG_ID_CONFLICT;
    }
    if (pset_get(&w->by_pair, o->user_id, o->item_id) != NULL)
        return CMSG_DUP_BUYER;
    if ((left = pset_get(&w->stock, o->item_id, 0)) == NULL)
        return CMSG_NO_ITEM;
    if (*left <= 0)
        return CMSG_NO_STOCK;
    (*left)--;
    pset_put(&w->by_id, o->order_id, 0, o->user_id);
    pset_put(&w->by_id, o->order_id, -1, o->item_id);
    pset_put(&w->by_pair, o->user_id, o->item_id, o->order_id);
    return CMSG_INSERTED; /* tentative: confirmed by RETURNING */
}

/* In one transaction: fences, then for the orders they let through the
 * item rows and the orders already there, then each order's outcome in
 * arrival order (earlier orders of the batch count as existing for later
 * ones). *ninsert and *nreject: how many to insert and to record refused. */
static int decide(struct sink *s, struct work *w, struct sink_order *v, size_t n, size_t *ninsert,
                  size_t *nreject, int *status, char *err, size_t errlen)
{
    size_t ni, k;
    if (check_fences(s, w, v, n, status, err, errlen) != 0)
        return -1;
    k = gather_open(w, v, n, &ni);
    if (k == 0)
        return 0;
    if (load_stock(s, w, ni, status, err, errlen) != 0 || load_existing(s, w, k, status, err, errlen) != 0)
        return -1;
    *ninsert = *nreject = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i].outcome == CMSG_RETRY)
            continue;
        v[i].outcome = decide_one(w, v[i].o);
        if (v[i].outcome == CMSG_INSERTED)
            (*ninsert)++;
        else if (cmsg_is_refusal(v[i].outcome))
            (*nreject)++;
    }
    return 0;
}

static int do_insert(struct sink *s, struct work *w, struct sink_order *v, size_t n, int *status, char *err,
                     size_t errlen)
{
    size_t k = 0;
    const char *pp[5];
    PGresult *r;
    struct pset got;
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
    params_reset(w);
    arr_i64(&w->p[0], w->ids, k);
    arr_i64(&w->p[1], w->uids, k);
    arr_i64(&w->p[2], w->iids, k);
    arr_i64(&w->p[3], w->rat, k);
    arr_i64(&w->p[4], w->fc, k);
    if (params_oom(w, 5))
        return fail_oom(status, err, errlen);
    for (int i = 0; i < 5; i++)
        pp[i] = w->p[i].data;
    if (!(r = run(s, "insert", 5, pp, PGRES_TUPLES_OK, status, err, errlen)))
        return -1;
    if (pset_init(&got, (size_t)PQntuples(r)) != 0) {
        PQclear(r);
        pset_free(&got);
        return fail_oom(status, err, errlen);
    }
    for (int i = 0; i < PQntuples(r); i++) {
        int64_t o;
        if (util_parse_i64(PQgetvalue(r, i, 0), 1, INT64_MAX, &o) == 0)
            pset_put(&got, o, 0, 1);
    }
    PQclear(r);
    /* Not inserted although nothing was there when we looked: a concurrent
     * transaction (an id collision across users) won. Look again next time. */
    for (size_t i = 0; i < n; i++)
        if (v[i].outcome == CMSG_INSERTED && !pset_get(&got, v[i].o->order_id, 0))
            v[i].outcome = CMSG_RETRY;
    pset_free(&got);
    return 0;
}

static int do_reject(struct sink *s, struct work *w, struct sink_order *v, size_t n, int *status, char *err,
                     size_t errlen)
{
    size_t k = 0;
    const char *pp[5];
    PGresult *r;
    params_reset(w);
    mbuf_printf(&w->p[3], "{");
    for (size_t i = 0; i < n; i++) {
        const char *why = cmsg_reason(v[i].outcome);
        if (!cmsg_is_refusal(v[i].outcome))
            continue;
        w->ids[k] = v[i].o->order_id;
        w->uids[k] = v[i].o->user_id;
        w->iids[k] = v[i].o->item_id;
        w->rat[k] = v[i].o->reserved_at_ms;
        mbuf_printf(&w->p[3], k ? ",%s" : "%s", why);
        k++;
    }
    mbuf_printf(&w->p[3], "}");
    arr_i64(&w->p[0], w->ids, k);
    arr_i64(&w->p[1], w->uids, k);
    arr_i64(&w->p[2], w->iids, k);
    arr_i64(&w->p[4], w->rat, k);
    if (params_oom(w, 5))
        return fail_oom(status, err, errlen);
    for (int i = 0; i < 5; i++)
        pp[i] = w->p[i].data;
    if (!(r = run(s, "reject", 5, pp, PGRES_COMMAND_OK, status, err, errlen)))
        return -1;
    PQclear(r);
    return 0;
}

int sink_write(struct sink *s, struct sink_order *v, size_t n, sink_precommit_fn precommit, void *arg,
               char *err, size_t errlen)
{
    struct work w = { 0 };
    int status = SINK_TRANSIENT;
    size_t ninsert = 0, nreject = 0;
    bool in_txn = false;

    for (size_t i = 0; i < n; i++)
        v[i].outcome = CMSG_PENDING;
    if (n == 0)
        return SINK_OK;
    if (sink_ensure(s, err, errlen) != 0)
        return SINK_TRANSIENT;
    w.users = malloc(n * sizeof(int64_t));
    w.fences = malloc(n * sizeof(int64_t));
    w.ids = malloc(n * sizeof(int64_t));
    w.uids = malloc(n * sizeof(int64_t));
    w.iids = malloc(n * sizeof(int64_t));
    w.items = malloc(n * sizeof(int64_t));
    w.rat = malloc(n * sizeof(int64_t));
    w.fc = malloc(n * sizeof(int64_t));
    if (!w.users || !w.fences || !w.ids || !w.uids || !w.iids || !w.items || !w.rat || !w.fc ||
        pset_init(&w.fence_ok, n) != 0 || pset_init(&w.by_id, 2 * n) != 0 || pset_init(&w.by_pair, n) != 0 ||
        pset_init(&w.stock, n) != 0) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if ((status = plain(s, "BEGIN", err, errlen)) != SINK_OK)
        goto fail;
    in_txn = true;
    status = SINK_TRANSIENT;
    if (decide(s, &w, v, n, &ninsert, &nreject, &status, err, errlen) != 0)
        goto fail;
    if (ninsert > 0 && do_insert(s, &w, v, n, &status, err, errlen) != 0)
        goto fail;
    if (nreject > 0 && do_reject(s, &w, v, n, &status, err, errlen) != 0)
        goto fail;
    if (precommit && precommit(arg) != 0) {
        snprintf(err, errlen, "a lease was lost before commit");
        status = SINK_ABORTED;
        goto fail;
    }
    in_txn = false;
    if ((status = plain(s, "COMMIT", err, errlen)) != SINK_OK)
        goto fail;
    work_free(&w);
    return SINK_OK;
fail:
    if (in_txn && s->pg && PQstatus(s->pg) == CONNECTION_OK)
        PQclear(PQexec(s->pg, "ROLLBACK"));
    for (size_t i = 0; i < n; i++)
        v[i].outcome = CMSG_PENDING;
    work_free(&w);
    return status;
}
