#include "expiry.h"

#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bgthread.h"
#include "cmetrics.h"
#include "embed.h"
#include "funclibs.h"
#include "keys.h"
#include "log.h"
#include "pgtrip.h"
#include "rfunc.h"
#include "rpipe.h"
#include "rstate.h"
#include "util.h"

/* seckill_return's keys; its arguments are the rebuy flag, then two per
 * order (its id and user). */
#define EXP_KEYS 4
#define EXP_RETURN_ARGS 2
/* After a failed pass (a service down) the thread waits this long, doubling
 * to the cap: the connections are remade on the next pass. */
#define EXP_BACKOFF_BASE_MS 100
#define EXP_BACKOFF_CAP_MS 5000

struct ret_row {
    int64_t order_id, item_id, user_id;
    int64_t changed_ms;   /* when it expired or was cancelled (order_returns.created_at) */
    enum ost_state state; /* OST_EXPIRED or OST_CANCELLED (ostate.h) */
    bool ok;              /* Redis has its unit back and its state (or holds no item to give them to) */
};

struct expiry {
    const struct cfg *cfg;
    struct bgthread t;
    struct pgsess pg;
    struct pgtrip trip;
    struct rp *rp;
    struct rp_batch batch;
    struct rfunc return_fn; /* seckill_return */
    struct rs rs;           /* the orders' states (rstate.h) */
    struct log_repeat say_pg, say_redis, say_missing, say_short;
    int fails;            /* failed passes in a row: the backoff's exponent */
    int64_t counted_ms;   /* when the gauge of returns not done was last read */
    struct ret_row *rows; /* the pass's due returns, sorted by item */
    size_t nrows, cap;
    const char **argv; /* room for one call: keys, flag, two (or three) per order */
    char (*vals)[24];  /* the orders' ids, users and times as text */
    struct pgarr ids;  /* the orders of a return statement (cons_return_done, cons_return_later) */
};

/* --- PostgreSQL ------------------------------------------------------------ */

/* The statements of the expiry's session, each planned for the values it
 * is given (plan_each_run), as they always were: a pass runs each once. */
static const struct pgsess_stmt exp_stmts[] = {
    { "expire", embed_cons_expire, 2, true },
    { "returns_due", embed_cons_returns_due, 1, true },
    { "return_done", embed_cons_return_done, 1, true },
    { "return_later", embed_cons_return_later, 2, true },
    { "returns_pending", embed_cons_returns_pending, 0, true },
};

/* Run the statement queued on e->trip, in a round trip (and a transaction)
 * of its own: its result, valid until pgtrip_reset; or NULL, the failure
 * said once while it lasts: a transient one (the connection, a deadlock) is
 * retried after the backoff, the connection remade if it broke; a refusal
 * of the data too, as an error an operator must look at (the same rows
 * would be refused again: they stay where they are, nothing is lost). */
static PGresult *run_one(struct expiry *e, int at, const char *what)
{
    char err[512];
    enum pgt_status st = pgtrip_run(&e->trip, err, sizeof(err));
    if (st == PGT_OK)
        return pgtrip_result(&e->trip, at);
    pgtrip_rollback(&e->trip);
    if (st == PGT_DATA)
        log_repeat(&e->say_pg, LOG_LVL_ERROR, "expiry: postgres refused",
                   "expiry: postgres refused %s: %s; retried after the backoff (logged once while it lasts)",
                   what, err);
    else
        log_repeat(&e->say_pg, LOG_LVL_WARNING, "expiry: postgres",
                   "expiry: postgres: %s: %s; retried (logged once while it lasts)", what, err);
    return NULL;
}

/* Queue the prepared statement name with its n parameters p and run it. */
static PGresult *run_params(struct expiry *e, const char *name, int n, const struct pgparam *p,
                            ExecStatusType want, const char *what)
{
    return run_one(e, pgtrip_params(&e->trip, name, p, n, want), what);
}

static int cmp_item(const void *a, const void *b)
{
    const struct ret_row *x = a, *y = b;
    return x->item_id < y->item_id ? -1 : x->item_id > y->item_id;
}

/* Room for limit returns. 0, or -1 out of memory. */
static int reserve(struct expiry *e, size_t limit)
{
    if (limit <= e->cap)
        return 0;
    struct ret_row *rows = realloc(e->rows, limit * sizeof(*rows));
    if (rows)
        e->rows = rows;
    const char **argv = realloc(e->argv, (limit * EXP_RETURN_ARGS + EXP_KEYS + 1) * sizeof(*argv));
    if (argv)
        e->argv = argv;
    char(*vals)[24] = realloc(e->vals, limit * EXP_RETURN_ARGS * sizeof(*vals));
    if (vals)
        e->vals = vals;
    if (!rows || !argv || !vals)
        return -1;
    e->cap = limit;
    return 0;
}

/* Row i of cons_returns_due.sql into r. 0, or -1 when a value is not what
 * the table's checks allow (never guessed: the row is left for a later
 * pass, and said). */
static int parse_due(const PGresult *res, int i, struct ret_row *r)
{
    const char *why = PQgetvalue(res, i, 3);
    r->ok = false;
    /* A return's reason is the state of an order that gave its unit back. */
    r->state = ost_of_pg_word(why);
    if (r->state == OST_NONE || ost_holds_unit(r->state) ||
        util_parse_i64(PQgetvalue(res, i, 0), 1, INT64_MAX, &r->order_id) != 0 ||
        util_parse_i64(PQgetvalue(res, i, 1), 1, INT64_MAX, &r->item_id) != 0 ||
        util_parse_i64(PQgetvalue(res, i, 2), 1, INT64_MAX, &r->user_id) != 0 ||
        util_parse_i64(PQgetvalue(res, i, 4), 1, INT64_MAX, &r->changed_ms) != 0) {
        log_warn("expiry: order_returns row of order %s (reason '%s') is not one this build knows; "
                 "left as it is",
                 PQgetvalue(res, i, 0), why);
        return -1;
    }
    return 0;
}

/* The returns Redis does not have yet whose try is due (cons_returns_due.sql),
 * sorted by item. 0, or -1. */
static int load_due(struct expiry *e, int limit)
{
    char lim[16];
    snprintf(lim, sizeof(lim), "%d", limit);
    const struct pgparam p[] = { { .text = lim } };
    e->nrows = 0;
    if (reserve(e, (size_t)limit) != 0) {
        log_error("expiry: out of memory for %d returns", limit);
        return -1;
    }
    PGresult *res = run_params(e, "returns_due", 1, p, PGRES_TUPLES_OK, "reading the returns due");
    if (!res)
        return -1;
    for (int i = 0; i < PQntuples(res) && (size_t)i < e->cap; i++)
        if (parse_due(res, i, &e->rows[e->nrows]) == 0)
            e->nrows++;
    pgtrip_reset(&e->trip);
    qsort(e->rows, e->nrows, sizeof(*e->rows), cmp_item);
    return 0;
}

/* Expire the orders of up to limit windows that ended (cons_expire.sql):
 * one statement, so their status, stock_left and return rows commit
 * together. Its rows are the returns to send now, sorted by item, as
 * load_due leaves them; its last column, how many windows it took (paid or
 * cancelled orders' windows are taken without an expiry). 0, *n (how many
 * expired) and *taken, or -1. */
static int expire_due(struct expiry *e, int limit, int *n, int64_t *taken)
{
    char lim[16], first[16];
    snprintf(lim, sizeof(lim), "%d", limit);
    snprintf(first, sizeof(first), "%d", EXPIRY_FIRST_TRY_MS);
    const struct pgparam p[] = { { .text = lim }, { .text = first } };
    e->nrows = 0;
    *n = 0;
    *taken = 0;
    if (reserve(e, (size_t)limit) != 0) {
        log_error("expiry: out of memory for %d returns", limit);
        return -1;
    }
    PGresult *res = run_params(e, "expire", 2, p, PGRES_TUPLES_OK, "expiring orders");
    if (!res)
        return -1;
    if (PQntuples(res) > 0 && util_parse_i64(PQgetvalue(res, 0, 5), 0, INT64_MAX, taken) != 0)
        log_warn("expiry: the count of windows taken is not a number: '%s'", PQgetvalue(res, 0, 5));
    for (int i = 0; i < PQntuples(res) && (size_t)i < e->cap; i++) {
        if (PQgetisnull(res, i, 0)) /* none expired: the row only carries the count */
            continue;
        (*n)++;
        if (parse_due(res, i, &e->rows[e->nrows]) == 0)
            e->nrows++;
    }
    pgtrip_reset(&e->trip);
    qsort(e->rows, e->nrows, sizeof(*e->rows), cmp_item);
    if (*n > 0) {
        CM_ADD(expired, *n);
        log_debug("expiry: %d orders not paid in time expired; their units go back on sale", *n);
    }
    return 0;
}

/* The ids of the rows whose ok is want, as a bigint[] into e->ids; how
 * many. */
static size_t ids_of(struct expiry *e, bool want)
{
    size_t n = 0;
    pgarr_begin(&e->ids, PGARR_INT8);
    for (size_t i = 0; i < e->nrows; i++)
        if (e->rows[i].ok == want) {
            pgarr_add_i64(&e->ids, e->rows[i].order_id);
            n++;
        }
    pgarr_end(&e->ids);
    return n;
}

/* Mark the rows Redis took done, and the others for a later try. 0, or -1. */
static int mark(struct expiry *e)
{
    char cap[16];
    const struct pgparam done[] = { { .arr = &e->ids } }, later[] = { { .arr = &e->ids }, { .text = cap } };
    snprintf(cap, sizeof(cap), "%d", CFG_GET(e->cfg->consumer.return_backoff_cap_ms));
    if (ids_of(e, true) > 0) {
        if (!run_params(e, "return_done", 1, done, PGRES_COMMAND_OK, "marking returns done"))
            return -1;
        pgtrip_reset(&e->trip);
    }
    if (ids_of(e, false) > 0) {
        if (!run_params(e, "return_later", 2, later, PGRES_COMMAND_OK, "deferring returns"))
            return -1;
        pgtrip_reset(&e->trip);
    }
    return 0;
}

/* The gauge of returns not done (cons_returns_pending.sql), once per
 * consumer.expire_interval_ms at most: the count reads the whole pending
 * index, which a backlog makes long (2.2 ms a pass in bench/expiry, more
 * than the batch's other statements but the expiry itself). 0, or -1. */
static int count_pending(struct expiry *e)
{
    int64_t n = 0, now = util_mono_ms();
    if (now - e->counted_ms < CFG_GET(e->cfg->consumer.expire_interval_ms))
        return 0;
    PGresult *res = run_params(e, "returns_pending", 0, NULL, PGRES_TUPLES_OK, "counting returns");
    if (!res)
        return -1;
    if (util_parse_i64(PQgetvalue(res, 0, 0), 0, INT64_MAX, &n) == 0)
        CM_SET(returns_pending, n);
    pgtrip_reset(&e->trip);
    e->counted_ms = now;
    return 0;
}

/* --- Redis ------------------------------------------------------------------ */

/* The end of the run of rows of one item from i on. */
static size_t item_end(const struct expiry *e, size_t i)
{
    size_t j = i;
    while (j < e->nrows && e->rows[j].item_id == e->rows[i].item_id)
        j++;
    return j;
}

/* The seckill_return call of rows i..j (one item): its units back. 0, or -1. */
static int add_return(struct expiry *e, size_t i, size_t j, char k[][KEYS_MAX], const char *returned)
{
    size_t a = 0;
    e->argv[a++] = k[KEYS_ITEM_STOCK];
    e->argv[a++] = k[KEYS_ITEM_BUYERS];
    e->argv[a++] = k[KEYS_ITEM_ORDERS];
    e->argv[a++] = returned;
    e->argv[a++] = CFG_GET(e->cfg->sale.rebuy_after_cancel) ? "1" : "0";
    for (size_t m = i; m < j; m++) {
        snprintf(e->vals[EXP_RETURN_ARGS * m], sizeof(e->vals[0]), "%" PRId64, e->rows[m].order_id);
        snprintf(e->vals[EXP_RETURN_ARGS * m + 1], sizeof(e->vals[0]), "%" PRId64, e->rows[m].user_id);
        e->argv[a++] = e->vals[EXP_RETURN_ARGS * m];
        e->argv[a++] = e->vals[EXP_RETURN_ARGS * m + 1];
    }
    return rp_fcall(&e->batch, e->return_fn.name, EXP_KEYS, (int)(a - EXP_KEYS), e->argv, NULL) < 0 ? -1 : 0;
}

/* The marks of rows i..j (one item): their states, expired or cancelled
 * with the time, for the buyers' status calls; one seckill_mark call
 * (rstate.h). 0, or -1. */
static int add_return_marks(struct expiry *e, size_t i, size_t j)
{
    for (size_t m = i; m < j; m++) {
        const struct ret_row *r = &e->rows[m];
        struct rs_row row = { r->order_id, r->item_id, r->state, r->changed_ms };
        if (rs_put(&e->rs, &row) != 0)
            return -1;
    }
    return rs_add(&e->rs, &e->batch) == 1 ? 0 : -1;
}

/* Two calls per item of the due rows, routed by the item's keys (one slot):
 * seckill_return, then seckill_mark. Both go in the one round trip and both
 * must succeed before the return is marked done, so a crash or a failure
 * between them sends both again; each is idempotent. 0, or -1 out of memory. */
static int add_calls(struct expiry *e)
{
    char k[KEYS_ITEM_PARTS][KEYS_MAX], returned[KEYS_MAX];
    rp_batch_reset(&e->batch);
    rs_begin(&e->rs);
    for (size_t i = 0, j; i < e->nrows; i = j) {
        j = item_end(e, i);
        if (keys_item_all(k, e->cfg->redis.key_prefix, e->rows[i].item_id) != 0 ||
            keys_item(returned, sizeof(returned), e->cfg->redis.key_prefix, e->rows[i].item_id,
                      KEYS_ITEM_RETURNED) < 0)
            return -1;
        if (add_return(e, i, j, k, returned) != 0 || add_return_marks(e, i, j) != 0)
            return -1;
    }
    return 0;
}

/* seckill_return call c answered an integer; if not, its words go into why
 * (the first one). */
static bool gave_back(struct expiry *e, int c, char *why, size_t whylen)
{
    const redisReply *r = rp_reply(&e->batch, c);
    bool ok = rp_status(&e->batch, c) == RP_OK && r != NULL && r->type == REDIS_REPLY_INTEGER;
    if (!ok && why[0] == '\0')
        snprintf(why, whylen, "%s", r && r->type == REDIS_REPLY_ERROR ? r->str : "no answer");
    return ok;
}

/* Which items Redis answered both calls of: their rows are ok. The first
 * failure's words go into why. How many rows are not ok. */
static size_t take_replies(struct expiry *e, char *why, size_t whylen)
{
    struct rs_said said;
    size_t failed = 0;
    int c = 0, k = 0;
    rs_read(&e->rs, &e->batch, &said);
    for (size_t i = 0, j; i < e->nrows; i = j, c += 2, k++) {
        j = item_end(e, i);
        const redisReply *r = rp_reply(&e->batch, c);
        bool ok = gave_back(e, c, why, whylen);
        ok = rs_answered(&e->rs, k) && ok;
        if (ok && r->integer > 0)
            CM_ADD(returned, r->integer);
        if (ok && r->integer < 0)
            log_notice("expiry: item %" PRId64 " is not in Redis: its %zu returned units are in stock_left, "
                       "which 'seckillctl item load' rebuilds it from",
                       e->rows[i].item_id, j - i);
        for (size_t m = i; m < j; m++)
            e->rows[m].ok = ok;
        failed += ok ? 0 : j - i;
    }
    if (said.answered < said.calls && why[0] == '\0')
        snprintf(why, whylen, "%s", said.why[0] ? said.why : "no answer");
    return failed;
}

/* With redis.min_replicas_ack, returns fewer replicas hold than that are
 * not done: a failover now would lose them while PostgreSQL said done, the
 * units gone from the sale for good. They are sent again later (a return is
 * safe to repeat: the returned set knows each order). How many rows are
 * not done. */
static size_t replicas_hold(struct expiry *e, size_t failed)
{
    int want = e->batch.wait_replicas;
    if (failed == e->nrows || !rp_replicas_short(&e->batch)) {
        if (want > 0 && failed < e->nrows)
            log_repeat_end(&e->say_short, "the replicas hold the returns");
        return failed;
    }
    log_repeat(&e->say_short, LOG_LVL_WARNING, "expiry: replicas short",
               "expiry: redis: fewer than %d replicas hold the returned units; they are sent again later "
               "(logged once while it lasts)",
               want);
    for (size_t m = 0; m < e->nrows; m++)
        e->rows[m].ok = false;
    return e->nrows;
}

/* Give the due rows' units back in one pipelined round trip (one per
 * primary on a Cluster); each row's ok says whether Redis took it. */
static void send_returns(struct expiry *e)
{
    char err[256] = "", why[256] = "";
    size_t failed = e->nrows;
    if (!e->rp && rp_open(e->cfg, cfg_role_self(), &e->rp, err, sizeof(err)) != 0)
        goto out;
    if (add_calls(e) != 0) {
        snprintf(err, sizeof(err), "out of memory");
        goto out;
    }
    rp_durable(&e->batch);
    if (rp_run(e->rp, &e->batch, err, sizeof(err)) != 0)
        log_debug("expiry: redis: %s", err);
    if (e->batch.missing > 0) {
        rfunc_missing_text(&e->return_fn, why, sizeof(why));
        log_repeat(&e->say_missing, LOG_LVL_ERROR, "expiry: function missing",
                   "expiry: redis: %s; units wait in order_returns (logged once while it lasts)", why);
    }
    why[0] = '\0';
    failed = take_replies(e, why, sizeof(why));
    failed = replicas_hold(e, failed);
    if (failed < e->nrows && e->batch.missing == 0)
        log_repeat_end(&e->say_missing, "the return function answered");
    if (why[0]) /* the replies' reason, else the round trip's (err as it is) */
        snprintf(err, sizeof(err), "%s", why);
out:
    rp_batch_reset(&e->batch);
    if (failed == 0) {
        log_repeat_end(&e->say_redis, "units returned");
        return;
    }
    CM_ADD(redis_errors, 1);
    log_repeat(&e->say_redis, LOG_LVL_WARNING, "expiry: redis",
               "expiry: redis: %s; units of expired orders wait in order_returns and are retried "
               "(logged once while it lasts)",
               err[0] ? err : "not answered");
}

/* --- the thread ------------------------------------------------------------- */

/* Give the rows loaded back to Redis and mark them. 0, or -1. */
static int give_back(struct expiry *e)
{
    if (e->nrows == 0)
        return 0;
    send_returns(e);
    return mark(e);
}

/* Expire what is due and give those units back, then the returns due for
 * a retry. 0 and *more (a full batch: go on at once), or -1 (PostgreSQL
 * failed). */
static int pass(struct expiry *e, bool *more)
{
    int limit = CFG_GET(e->cfg->consumer.expire_batch), n = 0;
    int64_t taken = 0;
    *more = false;
    char err[512];
    if (pgsess_ready(&e->pg, err, sizeof(err)) != 0 || expire_due(e, limit, &n, &taken) != 0 ||
        give_back(e) != 0)
        return -1;
    if (load_due(e, limit) != 0 || give_back(e) != 0 || count_pending(e) != 0)
        return -1;
    log_repeat_end(&e->say_pg, "a pass done");
    *more = taken >= limit || e->nrows == (size_t)limit;
    return 0;
}

static void *run(void *arg)
{
    struct expiry *e = arg;
    while (!bgt_stopping(&e->t)) {
        bool more = false;
        int64_t wait_ms = CFG_GET(e->cfg->consumer.expire_interval_ms);
        if (pass(e, &more) != 0) {
            int shift = e->fails < 6 ? e->fails : 6;
            e->fails++;
            wait_ms = EXP_BACKOFF_BASE_MS << shift;
            wait_ms = wait_ms < EXP_BACKOFF_CAP_MS ? wait_ms : EXP_BACKOFF_CAP_MS;
        } else {
            e->fails = 0;
            if (more)
                continue;
        }
        bgt_sleep_ms(&e->t, wait_ms);
    }
    return NULL;
}

int expiry_start(const struct cfg *c, struct expiry **out, char *err, size_t errlen)
{
    struct expiry *e = calloc(1, sizeof(*e));
    if (!e) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    /* Why PostgreSQL cannot be reached (a password, a certificate) is the
     * workers' to say, once: their connections fail the same way. */
    struct pgsess_conf pc = { .appname = "seckill-consumer-expiry", .stmts = exp_stmts,
                              .nstmts = ARRAY_SIZE(exp_stmts), .say = &e->say_pg, .who = "expiry",
                              .meanwhile = "orders past their payment window wait",
                              .why_elsewhere = "the workers' log says why" };
    pgsess_init(&e->pg, c, &pc);
    pgtrip_init(&e->trip, &e->pg);
    e->cfg = c;
    e->return_fn = (struct rfunc)RFUNC_INIT("seckill_return", &funclib_return);
    rs_init(&e->rs, c);
    rp_batch_init(&e->batch);
    if (bgt_start(&e->t, run, e) != 0) {
        snprintf(err, errlen, "expiry: cannot start its thread");
        free(e);
        return -1;
    }
    *out = e;
    return 0;
}

void expiry_stop(struct expiry *e)
{
    if (!e)
        return;
    bgt_stop(&e->t);
    pgtrip_free(&e->trip);
    pgsess_close(&e->pg);
    rp_close(e->rp);
    rp_batch_free(&e->batch);
    rs_free(&e->rs);
    free(e->rows);
    free(e->argv);
    free(e->vals);
    pgarr_free(&e->ids);
    free(e);
}
