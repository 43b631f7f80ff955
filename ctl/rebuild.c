#include "rebuild.h"

#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bucket.h"
#include "ctlpg.h"
#include "ctlrp.h"
#include "embed.h"
#include "funclibs.h"
#include "itembk.h"
#include "kmeta.h"
#include "keys.h"
#include "orderidx.h"
#include "ostate.h"
#include "rfunc.h"
#include "rpipe.h"
#include "stockchg.h"
#include "sweepage.h"
#include "util.h"

/* --- is anything still on its way? --------------------------------------- */

/* Messages of the topic the group has not consumed, counted against the end
 * offsets in ends (taken once, before the wait). -1 on error. */
static int64_t group_lag(rd_kafka_t *rk, const struct cfg *c, const int64_t *lo, const int64_t *ends,
                         int32_t n, char *where, size_t wlen, char *err, size_t errlen)
{
    int64_t *at = calloc((size_t)n + 1, sizeof(*at)), lag = 0;
    if (!at) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (kmeta_committed(rk, c->kafka.topic, n, KMETA_TIMEOUT_MS, at, err, errlen) != 0) {
        free(at);
        return -1;
    }
    where[0] = '\0';
    for (int32_t p = 0; p < n; p++) {
        int64_t from = at[p] < 0 ? lo[p] : at[p];
        if (from < ends[p]) {
            size_t used = strlen(where);
            lag += ends[p] - from;
            snprintf(where + used, wlen - used, "%spartition %" PRId32 " at %" PRId64 " of %" PRId64,
                     used ? ", " : "", p, from, ends[p]);
        }
    }
    free(at);
    return lag;
}

/* Wait for the delivery window (the sweep's floor, see sweepage.h: an
 * order reserved before the loss may reach the topic until then), then
 * until the group consumed everything the topic held after it. 0, or -1
 * after printing why not. */
static int wait_consumed(const struct cfg *c, int64_t wait_ms)
{
    char err[512], where[1024];
    int64_t *lo = NULL, *hi = NULL, lag = -1, window = sweep_min_age_ms(c);
    int32_t n = 0;
    int ret = -1;
    /* The live group's id, only to read its committed offsets. */
    rd_kafka_t *rk = kmeta_open(c, c->consumer.group_id, err, sizeof(err));
    if (!rk)
        goto fail;
    printf("waiting %" PRId64
           " ms for orders reserved before the loss to reach %s (2 x message.timeout.ms + 2 s)\n",
           window, c->kafka.topic);
    fflush(stdout);
    util_sleep_ms(window);

    if (kmeta_partitions(rk, c->kafka.topic, KMETA_TIMEOUT_MS, &n, err, sizeof(err)) != 0)
        goto fail;
    if (!(lo = calloc((size_t)n + 1, sizeof(*lo))) || !(hi = calloc((size_t)n + 1, sizeof(*hi)))) {
        snprintf(err, sizeof(err), "out of memory");
        goto fail;
    }
    if (kmeta_range(rk, c->kafka.topic, n, KMETA_TIMEOUT_MS, lo, hi, err, sizeof(err)) != 0)
        goto fail;
    int64_t end = util_mono_ms() + wait_ms, last = -1;
    for (;;) {
        if ((lag = group_lag(rk, c, lo, hi, n, where, sizeof(where), err, sizeof(err))) < 0)
            goto fail;
        if (lag == 0)
            break;
        if (util_mono_ms() >= end) {
            printf("refusing: consumer group %s has not consumed %" PRId64
                   " messages of %s that may hold orders "
                   "for these items (%s). Start the consumers and run this again (a replay does not move the "
                   "group's offsets).\n",
                   c->consumer.group_id, lag, c->kafka.topic, where);
            goto out;
        }
        if (lag != last)
            printf("waiting for consumer group %s: %" PRId64 " messages left\n", c->consumer.group_id, lag);
        fflush(stdout);
        last = lag;
        util_sleep_ms(500);
    }
    printf("consumer group %s has consumed %s up to its end\n", c->consumer.group_id, c->kafka.topic);
    ret = 0;
    goto out;
fail:
    printf("refusing: cannot tell whether orders are still on their way: %s\n", err);
out:
    free(lo);
    free(hi);
    if (rk) {
        rd_kafka_consumer_close(rk);
        rd_kafka_destroy(rk);
    }
    return ret;
}

/* --- Redis ------------------------------------------------------------------ */

/* 1 when Redis holds any of the item's keys, 0 when none, -1 on error. */
static int redis_holds(struct rp *p, const struct cfg *c, int64_t item)
{
    char k[KEYS_ITEM_PARTS][KEYS_MAX], err[256];
    enum rp_status st;
    if (keys_item_all(k, c->redis.key_prefix, item) != 0)
        return -1;
    const char *argv[KEYS_ITEM_PARTS + 1] = { "EXISTS" };
    for (int i = 0; i < KEYS_ITEM_PARTS; i++)
        argv[i + 1] = k[i];
    redisReply *r = rp_call(p, k[0], KEYS_ITEM_PARTS + 1, argv, NULL, &st, err, sizeof(err));
    int ret = r && r->type == REDIS_REPLY_INTEGER ? r->integer > 0 : -1;
    if (ret < 0)
        fprintf(stderr, "seckillctl: redis: %s\n", r && r->type == REDIS_REPLY_ERROR ? r->str : err);
    if (r)
        freeReplyObject(r);
    return ret;
}

/* --- rebuilding ------------------------------------------------------------- */

/* Values per order passed to seckill_item_rebuild2, and its keys: the
 * item's six and its returned set. */
#define RB_STATE_ARGS 6
#define RB_KEYS (KEYS_ITEM_PARTS + 1)

/* The order index (orderidx.h) of every settled order, pipelined: a buyer
 * who kept an order id finds it again. Best effort, like the producer's. */
static void index_orders(const struct cfg *c, struct rp *p, int64_t item, const PGresult *res)
{
    int n = PQntuples(res);
    char err[256];
    struct rp_batch b;
    struct oidx_entry *e = malloc((size_t)(n > 0 ? n : 1) * sizeof(*e));
    if (!e)
        return;
    rp_batch_init(&b);
    for (int i = 0; i < n; i++)
        e[i] = (struct oidx_entry){ ctlpg_i64(res, i, 0), item, ctlpg_i64(res, i, 1) };
    if (oidx_add(&b, c->redis.key_prefix, c->producer.status_ttl_s, e, (size_t)n) > 0)
        (void)rp_run(p, &b, err, sizeof(err)); /* the answers do not matter */
    rp_batch_free(&b);
    free(e);
}

/* Whether row i of item_states.sql's rows belongs in the slot rebuilt:
 * every row for an item without buckets (k 1); for one with buckets, the
 * rows of bucket's buyers (none for the item's own slot, bucket -1: it
 * only holds the reserve). */
static bool row_in_slot(const PGresult *res, int i, int k, int bucket)
{
    return k <= 1 || (bucket >= 0 && bucket_of(ctlpg_i64(res, i, 1), k) == bucket);
}

/* seckill_item_rebuild's arguments for each settled order of the slot
 * (item_states.sql rows: row_in_slot) into argv, their text in vals; *n
 * how many. Returns how many are persisted. */
static int state_args(const PGresult *res, int k, int bucket, const char **argv, char (*vals)[24], int *n)
{
    int persisted = 0;
    *n = 0;
    for (int i = 0; i < PQntuples(res); i++) {
        if (!row_in_slot(res, i, k, bucket))
            continue;
        char(*v)[24] = &vals[(size_t)*n * RB_STATE_ARGS];
        for (int f = 0; f < RB_STATE_ARGS; f++) {
            snprintf(v[f], sizeof(v[f]), "%s", PQgetvalue(res, i, f));
            argv[(size_t)*n * RB_STATE_ARGS + (size_t)f] = v[f];
        }
        (*n)++;
        /* the states holding a unit (seckill_ctl.lua's holds_unit; the
         * database has no queued order) */
        enum ost_state st = ost_of_letter(v[2][0]);
        persisted += st != OST_NONE && ost_holds_unit(st);
    }
    return persisted;
}

/* A return not yet in Redis would be given back again on top of a stock
 * rebuilt from stock_left, which counts it already (and the set of returned
 * orders that would stop it is gone with the item's keys): true, said, while
 * the item has one (win: item_show.sql's row). */
static bool returns_pending(const PGresult *win, int64_t item)
{
    int64_t n = ctlpg_i64(win, 0, 10);
    if (n > 0)
        printf("item %" PRId64 ": refusing: %" PRId64 " units of expired orders are still on their way "
               "back to Redis; run again once the consumer has sent them\n",
               item, n);
    return n > 0;
}

/* seckill_item_rebuild2's keys and arguments: k, then head (stock,
 * starts_ms, ends_ms, the rebuy flag), then the slot's settled orders of res
 * (item_states.sql; row_in_slot); their text in *vals, *n how many.
 * *buyers: the orders holding a unit. 0, or -1 out of memory (said). */
static int rebuild_args(const PGresult *res, int k, int bucket, char k_[][KEYS_MAX],
                        const char *const head[4], const char ***argv, char (**vals)[24], int *n,
                        int *buyers)
{
    int rows = PQntuples(res);
    if (!(*argv = calloc(RB_KEYS + 4 + (size_t)rows * RB_STATE_ARGS, sizeof(**argv))) ||
        !(*vals = calloc((size_t)rows * RB_STATE_ARGS + 1, sizeof(**vals)))) {
        fprintf(stderr, "seckillctl: out of memory\n");
        return -1;
    }
    for (int i = 0; i < RB_KEYS; i++)
        (*argv)[i] = k_[i];
    for (int i = 0; i < 4; i++)
        (*argv)[RB_KEYS + i] = head[i];
    *buyers = state_args(res, k, bucket, *argv + RB_KEYS + 4, *vals, n);
    return 0;
}

/* One slot of the item rebuilt (seckill_item_rebuild2): the item's own
 * (bucket -1: the stock, and every order when it has no buckets) or bucket
 * `bucket` of k (no units, its buyers' orders): a buyer's mark and status go
 * back to the slot their buys are checked in. head as rebuild_args. 0 with
 * *buyers and *orders grown, or -1 (said). */
static int rebuild_slot(const struct cfg *c, struct rp *p, const struct rfunc *s, int64_t item, int salt,
                        const char *const head[4], const PGresult *res, int k, int bucket, int *buyers,
                        int *orders)
{
    char keys[RB_KEYS][KEYS_MAX];
    const char **argv = NULL;
    char (*vals)[24] = NULL;
    redisReply *r = NULL;
    int n = 0, held = 0, ret = -1;
    if (keys_item_all_at(keys, c->redis.key_prefix, item, salt) != 0 ||
        keys_item_at(keys[KEYS_ITEM_PARTS], KEYS_MAX, c->redis.key_prefix, item, salt,
                     KEYS_ITEM_RETURNED) < 0 ||
        rebuild_args(res, k, bucket, keys, head, &argv, &vals, &n, &held) != 0)
        goto fail;
    if (!(r = ctlrp_fcall(p, s, true, RB_KEYS, 4 + n * RB_STATE_ARGS, argv, REDIS_REPLY_INTEGER)))
        goto fail;
    if (r->integer != 1) {
        printf("item %" PRId64 ": refusing: Redis holds keys of its %s again (rebuilt meanwhile?)\n", item,
               bucket < 0 ? "own slot" : "buckets");
        goto fail;
    }
    *buyers += held;
    *orders += n;
    ret = 0;
fail:
    if (r)
        freeReplyObject(r);
    free(argv);
    free(vals);
    return ret;
}

/* What seckill_item_rebuild2 does not write (its arguments stay as the
 * last release calls them): the payment window, the waiting room, the
 * pause (item_show.sql's columns 7, 13 and 14 in win), the buckets' names
 * and their windows' copies (itembk_publish), and the record of the live
 * stock changes. 0 or -1. */
static int restore_beside(const struct cfg *c, PGconn *pg, struct rp *p, int64_t item, const PGresult *win,
                          const struct itembk *bk, const char *window_key)
{
    if (ctlrp_pay_window(p, window_key, ctlpg_i64(win, 0, 7)) != 0 ||
        ctlrp_queue_window(p, c, item, ctlpg_i64(win, 0, 13), false) != 0 ||
        (ctlpg_i64(win, 0, 14) == 1 && ctlrp_pause_window(p, window_key, true) != 0) ||
        itembk_publish(p, c, item, bk) != 0)
        return -1;
    return stockchg_restore(pg, p, c, item);
}

/* The item's rows, checked: recon_item.sql's in *res (the stock), and
 * item_show.sql's in *win (the window, the buckets, into *bk). Refused
 * (said): not in the database, stock_left disagreeing with its orders, a
 * return still on its way, buckets seckillctl never writes. 0 or -1. */
static int read_item_rows(PGconn *pg, int64_t item, const char *const params[], PGresult **res,
                          PGresult **win, struct itembk *bk)
{
    if (!(*res = ctlpg_exec(pg, embed_recon_item, 1, params, PGRES_TUPLES_OK, "read item")) ||
        !(*win = ctlpg_exec(pg, embed_item_show, 1, params, PGRES_TUPLES_OK, "read item window")))
        return -1;
    if (PQntuples(*res) != 1 || PQntuples(*win) != 1) {
        printf("item %" PRId64 ": not in the database\n", item);
        return -1;
    }
    int64_t total = ctlpg_i64(*res, 0, 0), left = ctlpg_i64(*res, 0, 1), sold = ctlpg_i64(*res, 0, 2);
    if (left != total - sold) {
        printf("item %" PRId64 ": refusing: stock_left %" PRId64 " disagrees with its %" PRId64
               " orders of %" PRId64 "; run 'seckillctl reconcile --item %" PRId64 " --fix' first\n",
               item, left, sold, total, item);
        return -1;
    }
    if (returns_pending(*win, item))
        return -1;
    if (bucket_parse(PQgetvalue(*win, 0, 15), bk->salts, &bk->k) != 0) {
        printf("item %" PRId64 ": the database's buckets '%s' are not salts seckillctl wrote\n", item,
               PQgetvalue(*win, 0, 15));
        return -1;
    }
    return 0;
}

/* Rebuild one item: its own slot (the units not sold, and every order when
 * it has no buckets), then each bucket (its buyers' orders, no units: the
 * units all wait in the reserve, and buckets refill from it as they sell),
 * then what the rebuild function does not write, the order index and the
 * registry. */
static int rebuild_one(const struct cfg *c, PGconn *pg, struct rp *p, const struct rfunc *s, int64_t item)
{
    char sid[24], stock[24], starts[24] = "", ends[24] = "", win_key[KEYS_MAX], reg[KEYS_MAX], err[256];
    const char *params[] = { sid };
    enum rp_status st;
    struct itembk bk;
    PGresult *res = NULL, *win = NULL;
    redisReply *r = NULL;
    int buyers = 0, orders = 0, ret = -1;

    snprintf(sid, sizeof(sid), "%" PRId64, item);
    if (read_item_rows(pg, item, params, &res, &win, &bk) != 0)
        goto fail;
    int64_t total = ctlpg_i64(res, 0, 0), left = ctlpg_i64(res, 0, 1), sold = ctlpg_i64(res, 0, 2);
    if (ctlpg_i64(win, 0, 3) > 0)
        snprintf(starts, sizeof(starts), "%" PRId64, ctlpg_i64(win, 0, 3));
    if (ctlpg_i64(win, 0, 4) > 0)
        snprintf(ends, sizeof(ends), "%" PRId64, ctlpg_i64(win, 0, 4));
    PQclear(res);
    if (!(res = ctlpg_exec(pg, embed_item_states, 1, params, PGRES_TUPLES_OK, "read orders")))
        goto fail;
    snprintf(stock, sizeof(stock), "%" PRId64, left);
    const char *rebuy = CFG_GET(c->sale.rebuy_after_cancel) ? "1" : "0";
    const char *head[] = { stock, starts, ends, rebuy }, *bucket_head[] = { "0", starts, ends, rebuy };
    if (rebuild_slot(c, p, s, item, BUCKET_HOME, head, res, bk.k, -1, &buyers, &orders) != 0)
        goto fail;
    for (int b = 0; bk.k > 1 && b < bk.k; b++)
        if (rebuild_slot(c, p, s, item, bk.salts[b], bucket_head, res, bk.k, b, &buyers, &orders) != 0)
            goto fail;
    keys_item(win_key, sizeof(win_key), c->redis.key_prefix, item, KEYS_ITEM_WINDOW);
    if (restore_beside(c, pg, p, item, win, &bk, win_key) != 0)
        goto fail;
    index_orders(c, p, item, res);
    keys_items(reg, sizeof(reg), c->redis.key_prefix);
    r = rp_callf(p, reg, &st, err, sizeof(err), "SADD %s %s", reg, sid);
    if (!r || r->type != REDIS_REPLY_INTEGER) {
        fprintf(stderr, "seckillctl: redis: registering the item: %s\n", r ? r->str : err);
        goto fail;
    }
    printf("item %" PRId64 ": rebuilt: stock %" PRId64 ", %d buyers (%" PRId64 " of %" PRId64
           " sold), %d refused, expired or cancelled%s\n",
           item, left, buyers, sold, total, orders - buyers,
           starts[0] || ends[0] ? ", sale window restored" : "");
    ret = 0;
fail:
    if (r)
        freeReplyObject(r);
    if (res)
        PQclear(res);
    if (win)
        PQclear(win);
    return ret;
}

int rebuild_items(const struct cfg *c, const int64_t *ids, size_t n, int all, int64_t wait_ms)
{
    const struct rfunc s = RFUNC_INIT("seckill_item_rebuild2", &funclib_ctl);
    struct rp *p = NULL;
    PGconn *pg = NULL;
    int64_t *todo = NULL, *list = NULL;
    size_t ntodo = 0, failed = 0;
    int ret = 1;

    if (!(pg = ctlpg_open(c)))
        return 1;
    if (!(p = ctlrp_open(c)))
        goto fail;
    if (all) {
        if (ctlpg_item_ids(pg, &list, &n) != 0)
            goto fail;
        ids = list;
    }
    if (!(todo = calloc(n ? n : 1, sizeof(*todo))))
        goto fail;
    for (size_t i = 0; i < n; i++) {
        int held = redis_holds(p, c, ids[i]);
        if (held < 0)
            goto fail;
        if (held) {
            printf("item %" PRId64 ": Redis still holds it; nothing to rebuild%s\n", ids[i],
                   all ? "" : " (reconcile checks it)");
            failed += !all;
            continue;
        }
        todo[ntodo++] = ids[i];
    }
    if (failed)
        goto fail;
    if (ntodo == 0) {
        printf("nothing to rebuild\n");
        ret = 0;
        goto fail;
    }
    if (wait_consumed(c, wait_ms) != 0)
        goto fail;
    for (size_t i = 0; i < ntodo; i++)
        failed += rebuild_one(c, pg, p, &s, todo[i]) != 0;
    printf("%zu items rebuilt, %zu refused\n", ntodo - failed, failed);
    ret = failed ? 1 : 0;
fail:
    free(todo);
    free(list);
    rp_close(p);
    PQfinish(pg);
    return ret;
}
