#include "outbox.h"

#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bkmap.h"
#include "cmetrics.h"
#include "embed.h"
#include "funclibs.h"
#include "keys.h"
#include "util.h"

/* seckill_return's keys; its arguments are the rebuy flag, then two per
 * order (its id and user). */
#define OB_KEYS 4
#define OB_RETURN_ARGS 2

/* Each planned for the values it is given (plan_each_run), as they always
 * were: a pass runs each once. */
const struct pgsess_stmt ob_stmts[OB_NSTMTS] = {
    { "returns_due", embed_cons_returns_due, 1, true },
    { "return_done", embed_cons_return_done, 1, true },
    { "return_later", embed_cons_return_later, 2, true },
    { "returns_pending", embed_cons_returns_pending, 0, true },
};

void ob_init(struct outbox *o, const struct cfg *c, struct pgtrip *trip, struct log_repeat *say_pg)
{
    *o = (struct outbox){ .cfg = c, .trip = trip, .say_pg = say_pg };
    o->return_fn = (struct rfunc)RFUNC_INIT("seckill_return", &funclib_return);
    o->release_fn = (struct rfunc)RFUNC_INIT("seckill_release", &funclib_return);
    rs_init(&o->rs, c);
    rp_batch_init(&o->batch);
}

void ob_free(struct outbox *o)
{
    rp_close(o->rp);
    rp_batch_free(&o->batch);
    rs_free(&o->rs);
    bkmap_free(o->bk);
    free(o->rows);
    free(o->argv);
    free(o->vals);
    pgarr_free(&o->ids);
}

/* --- PostgreSQL ------------------------------------------------------------ */

/* Queue the session's statement name with its n parameters p and run it
 * (pgtrip_run_said): its result, valid until pgtrip_reset; or NULL, the
 * failure said once while it lasts. */
static PGresult *run_params(struct outbox *o, const char *name, int n, const struct pgparam *p,
                            ExecStatusType want, const char *what)
{
    int at = pgtrip_params(o->trip, name, p, n, want);
    return pgtrip_run_said(o->trip, o->say_pg, "expiry", what) == PGT_OK ? pgtrip_result(o->trip, at) : NULL;
}

static int cmp_item(const void *a, const void *b)
{
    const struct ob_row *x = a, *y = b;
    return x->item_id < y->item_id ? -1 : x->item_id > y->item_id;
}

int ob_room(struct outbox *o, size_t limit)
{
    if (limit <= o->cap)
        return 0;
    struct ob_row *rows = realloc(o->rows, limit * sizeof(*rows));
    if (rows)
        o->rows = rows;
    const char **argv = realloc(o->argv, (limit * OB_RETURN_ARGS + OB_KEYS + 1) * sizeof(*argv));
    if (argv)
        o->argv = argv;
    char(*vals)[24] = realloc(o->vals, limit * OB_RETURN_ARGS * sizeof(*vals));
    if (vals)
        o->vals = vals;
    if (!rows || !argv || !vals) {
        log_error("expiry: out of memory for %zu returns", limit);
        return -1;
    }
    o->cap = limit;
    return 0;
}

/* Row i of cons_returns_due.sql into r. 0, or -1 when a value is not what
 * the table's checks allow (never guessed: the row is left for a later
 * pass, and said). */
static int parse_due(const PGresult *res, int i, struct ob_row *r)
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

void ob_take(struct outbox *o, const PGresult *res)
{
    o->nrows = 0;
    for (int i = 0; i < PQntuples(res) && (size_t)i < o->cap; i++)
        if (!PQgetisnull(res, i, 0) && parse_due(res, i, &o->rows[o->nrows]) == 0)
            o->nrows++;
    qsort(o->rows, o->nrows, sizeof(*o->rows), cmp_item);
}

size_t ob_size(const struct outbox *o)
{
    return o->nrows;
}

/* The returns Redis does not have yet whose try is due (cons_returns_due.sql),
 * sorted by item. 0, or -1. */
static int load_due(struct outbox *o, int limit)
{
    char lim[16];
    snprintf(lim, sizeof(lim), "%d", limit);
    const struct pgparam p[] = { { .text = lim } };
    o->nrows = 0;
    if (ob_room(o, (size_t)limit) != 0)
        return -1;
    PGresult *res = run_params(o, "returns_due", 1, p, PGRES_TUPLES_OK, "reading the returns due");
    if (!res)
        return -1;
    ob_take(o, res);
    pgtrip_reset(o->trip);
    return 0;
}

/* The ids of the rows whose ok is want, as a bigint[] into o->ids; how
 * many. */
static size_t ids_of(struct outbox *o, bool want)
{
    size_t n = 0;
    pgarr_begin(&o->ids, PGARR_INT8);
    for (size_t i = 0; i < o->nrows; i++)
        if (o->rows[i].ok == want) {
            pgarr_add_i64(&o->ids, o->rows[i].order_id);
            n++;
        }
    pgarr_end(&o->ids);
    return n;
}

/* Mark the rows Redis took done, and the others for a later try. 0, or -1. */
static int mark(struct outbox *o)
{
    char cap[16];
    const struct pgparam done[] = { { .arr = &o->ids } }, later[] = { { .arr = &o->ids }, { .text = cap } };
    snprintf(cap, sizeof(cap), "%d", CFG_GET(o->cfg->consumer.return_backoff_cap_ms));
    if (ids_of(o, true) > 0) {
        if (!run_params(o, "return_done", 1, done, PGRES_COMMAND_OK, "marking returns done"))
            return -1;
        pgtrip_reset(o->trip);
    }
    if (ids_of(o, false) > 0) {
        if (!run_params(o, "return_later", 2, later, PGRES_COMMAND_OK, "deferring returns"))
            return -1;
        pgtrip_reset(o->trip);
    }
    return 0;
}

/* Once per consumer.expire_interval_ms at most: the count reads the whole
 * pending index, which a backlog makes long (2.2 ms a pass in bench/expiry,
 * more than the batch's other statements but the expiry itself). */
int ob_count(struct outbox *o)
{
    int64_t n = 0, now = util_mono_ms();
    if (now - o->counted_ms < CFG_GET(o->cfg->consumer.expire_interval_ms))
        return 0;
    PGresult *res = run_params(o, "returns_pending", 0, NULL, PGRES_TUPLES_OK, "counting returns");
    if (!res)
        return -1;
    if (util_parse_i64(PQgetvalue(res, 0, 0), 0, INT64_MAX, &n) == 0)
        CM_SET(returns_pending, n);
    pgtrip_reset(o->trip);
    o->counted_ms = now;
    return 0;
}

/* --- Redis ------------------------------------------------------------------ */

static int cmp_slot(const void *a, const void *b)
{
    const struct ob_row *x = a, *y = b;
    if (x->item_id != y->item_id)
        return x->item_id < y->item_id ? -1 : 1;
    return (x->salt > y->salt) - (x->salt < y->salt);
}

/* The item of the batch's row i (bkmap_learn_rows). */
static int64_t row_item(const void *rows, size_t i)
{
    return ((const struct ob_row *)rows)[i].item_id;
}

/* Each row (sorted by item) given the slot its buyer's mark and state are
 * in (its bucket's, for an item with buckets: bucket.h), the items' buckets
 * learnt (bkmap_learn_rows), then sorted by item and slot. 0, or -1 when an
 * item's buckets are not known (Redis did not answer): the rows wait for a
 * later try, for a buyer taken out of the item's own slot would stay in
 * their bucket. */
static int place_rows(struct outbox *o)
{
    int k, salts[BUCKET_MAX];
    if (!o->bk && !(o->bk = bkmap_new()))
        return -1;
    (void)bkmap_learn_rows(o->bk, o->rp, o->cfg->redis.key_prefix, o->rows, o->nrows, row_item);
    for (size_t i = 0; i < o->nrows; i++) {
        struct ob_row *r = &o->rows[i];
        if (!bkmap_get(o->bk, r->item_id, &k, salts))
            return -1;
        r->salt = bkmap_salt(o->bk, r->item_id, r->user_id);
    }
    qsort(o->rows, o->nrows, sizeof(*o->rows), cmp_slot);
    return 0;
}

/* The end of the run of rows from i on of one item (by_slot false) or of
 * one item's slot (true). */
static size_t run_end(const struct outbox *o, size_t i, bool by_slot)
{
    size_t j = i;
    while (j < o->nrows && o->rows[j].item_id == o->rows[i].item_id &&
           (!by_slot || o->rows[j].salt == o->rows[i].salt))
        j++;
    return j;
}

/* The slots rows i..j (one item) fall in. The item's calls in the batch are
 * its seckill_return, then a seckill_release per slot when it has buckets,
 * then a seckill_mark per slot (add_calls). */
static int slots_of(const struct outbox *o, size_t i, size_t j)
{
    int n = 0;
    for (size_t a = i; a < j; a = run_end(o, a, true))
        n++;
    return n;
}

/* A call of fn on keys, the rebuy flag, then rows i..j's order ids and
 * users (each row's text at its own place in o->vals). 0, or -1. */
static int add_orders_call(struct outbox *o, const char *fn, const char **keys, int nkeys, const char *flag,
                           size_t i, size_t j)
{
    size_t a = 0;
    for (int n = 0; n < nkeys; n++)
        o->argv[a++] = keys[n];
    o->argv[a++] = flag;
    for (size_t m = i; m < j; m++) {
        snprintf(o->vals[OB_RETURN_ARGS * m], sizeof(o->vals[0]), "%" PRId64, o->rows[m].order_id);
        snprintf(o->vals[OB_RETURN_ARGS * m + 1], sizeof(o->vals[0]), "%" PRId64, o->rows[m].user_id);
        o->argv[a++] = o->vals[OB_RETURN_ARGS * m];
        o->argv[a++] = o->vals[OB_RETURN_ARGS * m + 1];
    }
    return rp_fcall(&o->batch, fn, nkeys, (int)a - nkeys, o->argv, NULL) < 0 ? -1 : 0;
}

/* The seckill_return call of rows i..j (one item), in the item's own slot:
 * their units back (to the reserve, for an item in buckets, whose buyers
 * are taken out in their buckets instead: add_releases). 0, or -1. */
static int add_return(struct outbox *o, size_t i, size_t j, bool buckets)
{
    char k[KEYS_ITEM_PARTS][KEYS_MAX], returned[KEYS_MAX];
    const char *prefix = o->cfg->redis.key_prefix;
    int64_t item = o->rows[i].item_id;
    bool rebuy = CFG_GET(o->cfg->sale.rebuy_after_cancel) && !buckets;
    if (keys_item_all(k, prefix, item) != 0 || keys_item(returned, sizeof(returned), prefix, item,
                                                        KEYS_ITEM_RETURNED) < 0)
        return -1;
    const char *keys[OB_KEYS] = { k[KEYS_ITEM_STOCK], k[KEYS_ITEM_BUYERS], k[KEYS_ITEM_ORDERS], returned };
    return add_orders_call(o, o->return_fn.name, keys, OB_KEYS, rebuy ? "1" : "0", i, j);
}

/* One seckill_release call per bucket of rows i..j (one item in buckets):
 * each bucket's buyers taken out once. How many calls, or -1. */
static int add_releases(struct outbox *o, size_t i, size_t j)
{
    static const enum keys_item_part parts[3] = { KEYS_ITEM_BUYERS, KEYS_ITEM_ORDERS, KEYS_ITEM_RETURNED };
    const char *prefix = o->cfg->redis.key_prefix;
    const char *flag = CFG_GET(o->cfg->sale.rebuy_after_cancel) ? "1" : "0";
    int calls = 0;
    for (size_t a = i, b; a < j; a = b, calls++) {
        char k[3][KEYS_MAX];
        const char *keys[3] = { k[0], k[1], k[2] };
        b = run_end(o, a, true);
        for (int n = 0; n < 3; n++)
            if (keys_item_at(k[n], KEYS_MAX, prefix, o->rows[a].item_id, o->rows[a].salt, parts[n]) < 0)
                return -1;
        if (add_orders_call(o, o->release_fn.name, keys, 3, flag, a, b) != 0)
            return -1;
    }
    return calls;
}

/* The marks of rows i..j (one item): their states, expired or cancelled
 * with the time, for the buyers' status calls; one seckill_mark call per
 * slot (rstate.h). How many calls, or -1. */
static int add_return_marks(struct outbox *o, size_t i, size_t j)
{
    for (size_t m = i; m < j; m++) {
        const struct ob_row *r = &o->rows[m];
        struct rs_row row = { r->order_id, r->item_id, r->state, r->changed_ms, r->salt };
        if (rs_put(&o->rs, &row) != 0)
            return -1;
    }
    return rs_add(&o->rs, &o->batch);
}

/* The calls of each item of the due rows, each routed by its slot's keys:
 * seckill_return in the item's own slot, seckill_release in each bucket
 * (an item with buckets), then seckill_mark in each slot. All go in the one
 * round trip and all must succeed before the return is marked done, so a
 * crash or a failure between them sends them all again; each is
 * idempotent. 0, or -1 out of memory. */
static int add_calls(struct outbox *o)
{
    rp_batch_reset(&o->batch);
    rs_begin(&o->rs);
    for (size_t i = 0, j; i < o->nrows; i = j) {
        bool buckets = o->rows[i].salt != BUCKET_HOME;
        j = run_end(o, i, false);
        if (add_return(o, i, j, buckets) != 0 || (buckets && add_releases(o, i, j) < 0) ||
            add_return_marks(o, i, j) < 1)
            return -1;
    }
    return 0;
}

/* Command c of the batch answered an integer; if not, its words go into
 * why (the first one). */
static bool gave_back(struct outbox *o, int c, char *why, size_t whylen)
{
    const redisReply *r = rp_reply(&o->batch, c);
    bool ok = rp_status(&o->batch, c) == RP_OK && r != NULL && r->type == REDIS_REPLY_INTEGER;
    if (!ok && why[0] == '\0')
        snprintf(why, whylen, "%s", r && r->type == REDIS_REPLY_ERROR ? r->str : "no answer");
    return ok;
}

/* Whether Redis answered the calls of one item: commands c .. c + nrel of
 * the batch (its return and releases) and seckill_mark calls k .. k +
 * nmark - 1 (rstate.h's count). */
static bool item_answered(struct outbox *o, int c, int nrel, int k, int nmark, char *why, size_t whylen)
{
    bool ok = true;
    for (int n = 0; n <= nrel; n++)
        ok = gave_back(o, c + n, why, whylen) && ok;
    for (int n = 0; n < nmark; n++)
        ok = rs_answered(&o->rs, k + n) && ok;
    return ok;
}

/* Which items Redis answered every call of: their rows are ok. The first
 * failure's words go into why. How many rows are not ok. */
static size_t take_replies(struct outbox *o, char *why, size_t whylen)
{
    struct rs_said said;
    size_t failed = 0;
    int c = 0, k = 0;
    rs_read(&o->rs, &o->batch, &said);
    for (size_t i = 0, j; i < o->nrows; i = j) {
        j = run_end(o, i, false);
        int slots = slots_of(o, i, j), nrel = o->rows[i].salt != BUCKET_HOME ? slots : 0;
        bool ok = item_answered(o, c, nrel, k, slots, why, whylen);
        const redisReply *r = rp_reply(&o->batch, c);
        if (ok && r->integer > 0)
            CM_ADD(returned, r->integer);
        if (ok && r->integer < 0)
            log_notice("expiry: item %" PRId64 " is not in Redis: its %zu returned units are in stock_left, "
                       "which 'seckillctl item load' rebuilds it from",
                       o->rows[i].item_id, j - i);
        for (size_t m = i; m < j; m++)
            o->rows[m].ok = ok;
        failed += ok ? 0 : j - i;
        c += 1 + nrel + slots;
        k += slots;
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
static size_t replicas_hold(struct outbox *o, size_t failed)
{
    int want = o->batch.wait_replicas;
    if (failed == o->nrows || !rp_replicas_short(&o->batch)) {
        if (want > 0 && failed < o->nrows)
            log_repeat_end(&o->say_short, "the replicas hold the returns");
        return failed;
    }
    log_repeat(&o->say_short, LOG_LVL_WARNING, "expiry: replicas short",
               "expiry: redis: fewer than %d replicas hold the returned units; they are sent again later "
               "(logged once while it lasts)",
               want);
    for (size_t m = 0; m < o->nrows; m++)
        o->rows[m].ok = false;
    return o->nrows;
}

/* Give the due rows' units back in one pipelined round trip (one per
 * primary on a Cluster); each row's ok says whether Redis took it. */
static void send_returns(struct outbox *o)
{
    char err[256] = "", why[256] = "";
    size_t failed = o->nrows;
    if (!o->rp && rp_open(o->cfg, cfg_role_self(), &o->rp, err, sizeof(err)) != 0)
        goto out;
    if (place_rows(o) != 0) {
        snprintf(err, sizeof(err), "an item's buckets could not be read");
        goto out;
    }
    if (add_calls(o) != 0) {
        snprintf(err, sizeof(err), "out of memory");
        goto out;
    }
    rp_durable(&o->batch);
    if (rp_run(o->rp, &o->batch, err, sizeof(err)) != 0)
        log_debug("expiry: redis: %s", err);
    if (o->batch.missing > 0) {
        rfunc_missing_text(&o->return_fn, why, sizeof(why));
        log_repeat(&o->say_missing, LOG_LVL_ERROR, "expiry: function missing",
                   "expiry: redis: %s; units wait in order_returns (logged once while it lasts)", why);
    }
    why[0] = '\0';
    failed = take_replies(o, why, sizeof(why));
    failed = replicas_hold(o, failed);
    if (failed < o->nrows && o->batch.missing == 0)
        log_repeat_end(&o->say_missing, "the return function answered");
    if (why[0]) /* the replies' reason, else the round trip's (err as it is) */
        snprintf(err, sizeof(err), "%s", why);
out:
    rp_batch_reset(&o->batch);
    if (failed == 0) {
        log_repeat_end(&o->say_redis, "units returned");
        return;
    }
    CM_ADD(redis_errors, 1);
    log_repeat(&o->say_redis, LOG_LVL_WARNING, "expiry: redis",
               "expiry: redis: %s; units of expired orders wait in order_returns and are retried "
               "(logged once while it lasts)",
               err[0] ? err : "not answered");
}

/* --- the batch --------------------------------------------------------------- */

int ob_send(struct outbox *o)
{
    if (o->nrows == 0)
        return 0;
    send_returns(o);
    return mark(o);
}

int ob_retry(struct outbox *o, int limit)
{
    return load_due(o, limit) == 0 ? ob_send(o) : -1;
}
