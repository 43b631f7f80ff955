#include "item.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ctlopt.h"
#include "ctlpg.h"
#include "ctlrp.h"
#include "embed.h"
#include "funclibs.h"
#include "itembk.h"
#include "itempause.h"
#include "keys.h"
#include "log.h"
#include "pgconn.h"
#include "rconn.h"
#include "rpipe.h"
#include "rebuild.h"
#include "rfunc.h"
#include "stockchg.h"
#include "util.h"

/* The longest payment window item create takes: a week. */
#define ITEM_PAY_WITHIN_MAX_S 604800

static int pg_ok(PGconn *pg, PGresult *res, ExecStatusType want, const char *what)
{
    if (PQresultStatus(res) == want)
        return 0;
    fprintf(stderr, "seckillctl: %s: %s", what, PQerrorMessage(pg));
    return -1;
}

/* ms as a decimal string, or "" for 0 (no bound). */
static void ms_arg(char *buf, size_t len, int64_t ms)
{
    if (ms)
        snprintf(buf, len, "%" PRId64, ms);
    else
        buf[0] = 0;
}

/* Redis: set the stock and the window (with the payment window,
 * pay_within_s, 0 for none) unless buyers or reservations exist, and forget
 * the stock changes of an earlier sale of the item (at both ends: pg is the
 * caller's open transaction). 0 or -1. */
static int redis_load(const struct cfg *c, PGconn *pg, struct rp *p, int64_t item_id, int64_t stock,
                      const struct item_window *w, int64_t pay_within_s, const struct itembk *bk)
{
    char k[KEYS_ITEM_PARTS][KEYS_MAX], sstock[24], sid[24], err[256], starts[24], ends[24];
    redisReply *r = NULL;
    const struct rfunc s = RFUNC_INIT("seckill_item_load", &funclib_ctl);
    enum rp_status st;
    int ret = -1;

    if (keys_item_all(k, c->redis.key_prefix, item_id) != 0)
        goto fail;
    snprintf(sstock, sizeof(sstock), "%" PRId64, stock);
    snprintf(sid, sizeof(sid), "%" PRId64, item_id);
    /* Every slot checked before any is written; then the buckets, and the
     * item's own slot last. */
    if (itembk_idle(p, c, item_id, bk) != 0 || itembk_reset(p, c, item_id, bk) != 0)
        goto fail;
    ms_arg(starts, sizeof(starts), w->starts_ms);
    ms_arg(ends, sizeof(ends), w->ends_ms);
    const char *argv[] = { k[KEYS_ITEM_STOCK], k[KEYS_ITEM_BUYERS], k[KEYS_ITEM_PENDING], k[KEYS_ITEM_WINDOW],
                           k[KEYS_ITEM_ORDERS], sstock, starts, ends };
    if (!(r = ctlrp_fcall(p, &s, true, 5, 3, argv, REDIS_REPLY_INTEGER)))
        goto fail;
    if (r->integer == -1 || r->integer == -2) {
        fprintf(stderr,
                "seckillctl: item %" PRId64 " has %s in Redis: orders may still be on their way to the "
                "database; refusing to reset its stock\n",
                item_id, r->integer == -1 ? "pending reservations" : "buyers");
        goto fail;
    }
    freeReplyObject(r);
    r = NULL;
    /* Not in seckill_item_load, whose arguments stay as the last release's
     * programs call it: the item's orders can only be persisted once the
     * caller commits its row, after this. */
    if (ctlrp_pay_window(p, k[KEYS_ITEM_WINDOW], pay_within_s) != 0 ||
        ctlrp_queue_window(p, c, item_id, w->queue_opens_ms, true) != 0 ||
        itembk_publish(p, c, item_id, bk) != 0 || stockchg_forget(pg, p, c, item_id) != 0)
        goto fail;
    /* The registry the sweeper walks; outside the script because the key has
     * no item hash tag (on a Redis Cluster it lives on another shard). */
    keys_items(k[0], sizeof(k[0]), c->redis.key_prefix);
    r = rp_callf(p, k[0], &st, err, sizeof(err), "SADD %s %s", k[0], sid);
    if (r == NULL || r->type != REDIS_REPLY_INTEGER) {
        fprintf(stderr, "seckillctl: redis: registering the item: %s\n", r ? r->str : err);
        goto fail;
    }
    ret = 0;
fail:
    if (r)
        freeReplyObject(r);
    return ret;
}

int item_create(const struct cfg *c, int64_t item_id, int64_t stock, const char *name,
                const struct item_window *w, int64_t pay_within_s, struct itembk *bk)
{
    char err[512], sid[24], sstock[24], starts[24], ends[24], spay[24], queue[24], salts[BUCKET_MAX * 6];
    PGconn *pg = NULL;
    PGresult *res = NULL;
    struct rp *p = NULL;
    int ret = -1;

    snprintf(sid, sizeof(sid), "%" PRId64, item_id);
    snprintf(sstock, sizeof(sstock), "%" PRId64, stock);
    snprintf(spay, sizeof(spay), "%" PRId64, pay_within_s);
    if (pgconn_open(c, "seckillctl", &pg, err, sizeof(err)) != 0) {
        fprintf(stderr, "seckillctl: %s\n", err);
        return -1;
    }
    res = PQexec(pg, "BEGIN");
    if (pg_ok(pg, res, PGRES_COMMAND_OK, "begin") != 0)
        goto fail;
    PQclear(res);

    const char *p1[] = { sid };
    res = PQexecParams(pg, embed_item_orders, 1, NULL, p1, NULL, NULL, 0);
    if (pg_ok(pg, res, PGRES_TUPLES_OK, "count orders") != 0)
        goto fail;
    int64_t orders = 0;
    if (util_parse_i64(PQgetvalue(res, 0, 0), 0, INT64_MAX, &orders) != 0 || orders > 0) {
        fprintf(stderr, "seckillctl: item %s already has %s orders; refusing to overwrite it\n", sid,
                PQgetvalue(res, 0, 0));
        goto fail;
    }
    PQclear(res);
    res = NULL;
    if (!(p = ctlrp_open(c)) || itembk_place(p, c, item_id, bk->k, bk) != 0 ||
        bucket_format(salts, sizeof(salts), bk->salts, bk->k) < 0)
        goto fail;

    ms_arg(starts, sizeof(starts), w->starts_ms);
    ms_arg(ends, sizeof(ends), w->ends_ms);
    ms_arg(queue, sizeof(queue), w->queue_opens_ms);
    const char *p8[] = { sid, name, sstock, starts[0] ? starts : NULL, ends[0] ? ends : NULL, spay,
                         queue[0] ? queue : NULL, salts };
    res = PQexecParams(pg, embed_item_upsert, 8, NULL, p8, NULL, NULL, 0);
    if (pg_ok(pg, res, PGRES_COMMAND_OK, "insert item") != 0)
        goto fail;
    PQclear(res);

    /* Redis last, inside the open transaction: if Redis refuses, the row is
     * rolled back; if COMMIT then fails, Redis holds stock for an item the
     * database lacks and the command reports it, to be run again. */
    res = NULL;
    if (redis_load(c, pg, p, item_id, stock, w, pay_within_s, bk) != 0)
        goto fail;
    res = PQexec(pg, "COMMIT");
    const char *what = "commit (Redis already holds the stock; run the command again)";
    if (pg_ok(pg, res, PGRES_COMMAND_OK, what) != 0)
        goto fail;
    ret = 0;
fail:
    if (res)
        PQclear(res);
    rp_close(p);
    PQfinish(pg);
    return ret;
}

static void item_usage(FILE *f)
{
    fputs("usage: seckillctl [-c FILE] item create --id ID --stock N [--name NAME] [--starts-at T] "
          "[--ends-at T]\n"
          "                                   [--pay-within SECONDS] [--queue-opens-at T] [--buckets K]\n"
          "       seckillctl [-c FILE] item (add-stock | withdraw) --id ID --units N [--change-id CHANGE]\n"
          "       seckillctl [-c FILE] item (pause | resume) --id ID\n"
          "       seckillctl [-c FILE] item load (--id ID | --all) [--wait-ms N]\n"
          "       seckillctl [-c FILE] item show ID\n"
          "T: epoch milliseconds or ISO 8601 (2026-11-21T10:00:00Z, +01:00; UTC when no zone)\n"
          "--pay-within: seconds a buyer has to pay; an order not paid by then expires and its unit\n"
          "goes back on sale (absent or 0: no payment step, an order is final once persisted)\n"
          "--queue-opens-at: the item gets a waiting room, open from T, before --starts-at (which it\n"
          "needs): buyers join it, are shuffled at --starts-at and admitted at the rate the sale holds;\n"
          "a buy then needs an admission (docs/api.md)\n"
          "--buckets: the item's stock in K buckets (1-16, default 1: none) on as many Redis primaries,\n"
          "so that one hot item's buyers spread over them (docs/design.md, \"One item over many shards\")\n",
          f);
}

static int parse_time_opt(const char *opt, const char *v, int64_t *out)
{
    if (util_parse_time_ms(v, out) != 0 || *out <= 0) {
        fprintf(stderr, "seckillctl: %s must be epoch ms or ISO 8601 (2026-11-21T10:00:00Z), got '%s'\n", opt,
                v);
        return -1;
    }
    return 0;
}

/* Print an item: stock and window in the database and in Redis, sold,
 * pending and refused counts. 0, 1 when it does not exist, or -1. */
static int item_show(const struct cfg *c, int64_t item_id);

/* What the item create and item load command lines say. */
struct item_args {
    int64_t id, stock, wait_ms, pay_within_s, buckets;
    const char *name;
    struct item_window w;
    int all;
};

/* Parse the options after "create" or "load" into a. -1 to go on, else the
 * exit status (0 after --help). */
static int item_parse(int argc, char **argv, struct item_args *a)
{
    static const struct option opts[] = {
        { "id", required_argument, NULL, 'i' },
        { "stock", required_argument, NULL, 's' },
        { "name", required_argument, NULL, 'n' },
        { "all", no_argument, NULL, 'a' },
        { "wait-ms", required_argument, NULL, 'w' },
        { "starts-at", required_argument, NULL, 'S' },
        { "ends-at", required_argument, NULL, 'E' },
        { "pay-within", required_argument, NULL, 'P' },
        { "queue-opens-at", required_argument, NULL, 'Q' },
        { "buckets", required_argument, NULL, 'B' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (o) {
        case 'i':
            if (ctl_opt_item_id(optarg, &a->id) != 0)
                return 2;
            break;
        case 's':
            if (ctl_opt_range("--stock", optarg, 0, INT32_MAX, &a->stock) != 0)
                return 2;
            break;
        case 'n':
            a->name = optarg;
            break;
        case 'a':
            a->all = 1;
            break;
        case 'S':
            if (parse_time_opt("--starts-at", optarg, &a->w.starts_ms) != 0)
                return 2;
            break;
        case 'E':
            if (parse_time_opt("--ends-at", optarg, &a->w.ends_ms) != 0)
                return 2;
            break;
        case 'Q':
            if (parse_time_opt("--queue-opens-at", optarg, &a->w.queue_opens_ms) != 0)
                return 2;
            break;
        case 'P':
            /* A week at most: the window is an int of seconds in the items row. */
            if (util_parse_i64(optarg, 0, ITEM_PAY_WITHIN_MAX_S, &a->pay_within_s) != 0) {
                fprintf(stderr, "seckillctl: --pay-within must be seconds in [0, %d], got '%s'\n",
                        ITEM_PAY_WITHIN_MAX_S, optarg);
                return 2;
            }
            break;
        case 'w':
            if (ctl_opt_range("--wait-ms", optarg, 0, 3600000, &a->wait_ms) != 0)
                return 2;
            break;
        case 'B':
            if (ctl_opt_range("--buckets", optarg, 1, BUCKET_MAX, &a->buckets) != 0)
                return 2;
            break;
        case 'h':
            item_usage(stdout);
            return 0;
        default:
            item_usage(stderr);
            return 2;
        }
    }
    if (optind != argc) {
        item_usage(stderr);
        return 2;
    }
    return -1;
}

static int item_create_cmd(const struct cfg *c, const struct item_args *a)
{
    if (a->id == 0 || a->stock < 0 || a->all) {
        item_usage(stderr);
        return 2;
    }
    if (a->w.starts_ms && a->w.ends_ms && a->w.starts_ms >= a->w.ends_ms) {
        fprintf(stderr, "seckillctl: --ends-at must be after --starts-at\n");
        return 2;
    }
    /* The room shuffles its crowd at the sale's opening: there must be one,
     * after the room's. */
    if (a->w.queue_opens_ms && (!a->w.starts_ms || a->w.queue_opens_ms >= a->w.starts_ms)) {
        fprintf(stderr, "seckillctl: --queue-opens-at needs --starts-at, and must be before it\n");
        return 2;
    }
    /* A buy in a bucket cannot yet check its admission, which lives in the
     * item's own slot (itembk.h). */
    if (a->buckets > 1 && a->w.queue_opens_ms) {
        fprintf(stderr, "seckillctl: --buckets and --queue-opens-at: a waiting room in front of buckets "
                        "is not built yet (issue #57); choose one\n");
        return 2;
    }
    struct itembk bk = { .k = (int)a->buckets };
    if (item_create(c, a->id, a->stock, a->name, &a->w, a->pay_within_s, &bk) != 0)
        return 1;
    printf("item %" PRId64 " created: %" PRId64 " units", a->id, a->stock);
    if (bk.k > 1) {
        char salts[BUCKET_MAX * 6];
        bucket_format(salts, sizeof(salts), bk.salts, bk.k);
        printf(" in %d buckets (salts %s)", bk.k, salts);
    }
    if (a->w.starts_ms || a->w.ends_ms) {
        char from[40] = "open", until[40] = "sold out";
        if (a->w.starts_ms)
            util_format_time_ms(a->w.starts_ms, from, sizeof(from));
        if (a->w.ends_ms)
            util_format_time_ms(a->w.ends_ms, until, sizeof(until));
        printf(", on sale from %s until %s", from, until);
    }
    if (a->pay_within_s)
        printf(", to be paid within %" PRId64 " s", a->pay_within_s);
    if (a->w.queue_opens_ms) {
        char q[40];
        util_format_time_ms(a->w.queue_opens_ms, q, sizeof(q));
        printf(", its waiting room open from %s", q);
    }
    printf("\n");
    return 0;
}

int item_cmd(const struct cfg *c, int argc, char **argv)
{
    struct item_args a = { .stock = -1, .wait_ms = 60000, .name = "", .buckets = 1 };
    int ret;

    if (argc == 3 && strcmp(argv[1], "show") == 0) {
        if (util_parse_i64(argv[2], 1, INT64_MAX, &a.id) != 0) {
            fprintf(stderr, "seckillctl: item show: ID must be a positive 64-bit integer, got '%s'\n",
                    argv[2]);
            return 2;
        }
        return item_show(c, a.id);
    }
    if (argc >= 2 && (strcmp(argv[1], "add-stock") == 0 || strcmp(argv[1], "withdraw") == 0))
        return stockchg_cmd(c, argc - 1, argv + 1);
    if (argc >= 2 && (strcmp(argv[1], "pause") == 0 || strcmp(argv[1], "resume") == 0))
        return itempause_cmd(c, argc - 1, argv + 1);
    if (argc < 2 || (strcmp(argv[1], "create") != 0 && strcmp(argv[1], "load") != 0)) {
        item_usage(stderr);
        return 2;
    }
    if ((ret = item_parse(argc - 1, argv + 1, &a)) >= 0)
        return ret;
    if (strcmp(argv[1], "create") == 0)
        return item_create_cmd(c, &a);
    /* item load rebuilds Redis from the database and changes nothing there:
     * the window and the payment window stay as item create set them. */
    if ((a.id == 0) == !a.all || a.stock >= 0 || a.name[0] || a.w.starts_ms || a.w.ends_ms ||
        a.pay_within_s || a.w.queue_opens_ms || a.buckets != 1) {
        item_usage(stderr);
        return 2;
    }
    return rebuild_items(c, &a.id, a.id ? 1 : 0, a.all, a.wait_ms);
}

/* "2026-11-21T10:00:00.000Z", or what an open end means. */
static const char *window_end(int64_t ms, char *buf, size_t len, const char *open)
{
    if (!ms)
        return open;
    util_format_time_ms(ms, buf, len);
    return buf;
}

/* The window's state by the clock of the Redis that holds the item, the one
 * the reservation script uses (r: its answer to TIME). */
static const char *window_state(const redisReply *r, int64_t starts, int64_t ends)
{
    int64_t now;
    if (r == NULL || rconn_time_ms(r, &now) != 0)
        return "unknown (no Redis clock)";
    return starts && now < starts ? "not started" : ends && now >= ends ? "ended" : "open";
}

/* The Redis side of item show: one round trip, read only, on the item's
 * shard. */
static int show_redis(const struct cfg *c, int64_t item_id, int64_t starts, int64_t ends,
                      const struct itembk *bk)
{
    char err[256], why[256], ra[40], rb[40], k[KEYS_ITEM_PARTS][KEYS_MAX];
    struct rp_batch b;
    struct rp *p = NULL;
    const redisReply *rep[6];
    int bad = -1, ret = -1;

    err[0] = '\0';
    rp_batch_init(&b);
    if (keys_item_all(k, c->redis.key_prefix, item_id) != 0 ||
        rp_open(c, cfg_role_self(), &p, err, sizeof(err)) != 0) {
        printf("  redis      unreachable: %s\n", err);
        goto fail;
    }
    const char *route = k[KEYS_ITEM_STOCK];
    rp_addf(&b, route, "GET %s", k[KEYS_ITEM_STOCK]);
    rp_addf(&b, route, "HLEN %s", k[KEYS_ITEM_PENDING]);
    rp_addf(&b, route, "ZCARD %s", k[KEYS_ITEM_UNPUB]);
    rp_addf(&b, route, "SCARD %s", k[KEYS_ITEM_BUYERS]);
    rp_addf(&b, route, "HMGET %s starts_ms ends_ms %s", k[KEYS_ITEM_WINDOW], KEYS_WINDOW_PAUSED);
    rp_addf(&b, route, "TIME");
    if (b.n != 6) {
        printf("  redis      out of memory\n");
        goto fail;
    }
    (void)rp_run(p, &b, err, sizeof(err));
    for (int i = 0; i < b.n && bad < 0; i++)
        if ((rep[i] = rp_reply(&b, i)) == NULL || rep[i]->type == REDIS_REPLY_ERROR)
            bad = i;
    if (bad >= 0) {
        printf("  redis      %s\n", ctlrp_why(&b, bad, err, why, sizeof(why)));
        goto fail;
    }
    int64_t rs = 0, re = 0;
    bool paused = false;
    if (rep[4]->type == REDIS_REPLY_ARRAY && rep[4]->elements == 3) {
        if (rep[4]->element[0]->type == REDIS_REPLY_STRING)
            util_parse_i64(rep[4]->element[0]->str, 0, INT64_MAX, &rs);
        if (rep[4]->element[1]->type == REDIS_REPLY_STRING)
            util_parse_i64(rep[4]->element[1]->str, 0, INT64_MAX, &re);
        paused = rep[4]->element[2]->type == REDIS_REPLY_STRING;
    }
    if (rep[0]->type == REDIS_REPLY_NIL)
        printf("  redis      no stock loaded ('seckillctl item load --id %" PRId64 "')\n", item_id);
    else
        printf("  redis      stock %s, pending %lld, unpublished %lld, buyers %lld\n", rep[0]->str,
               rep[1]->integer, rep[2]->integer, rep[3]->integer);
    printf("  redis      window %s .. %s: %s by Redis's clock%s%s\n",
           window_end(rs, ra, sizeof(ra), "(open)"), window_end(re, rb, sizeof(rb), "(until sold out)"),
           window_state(rep[5], rs, re),
           paused ? ", PAUSED (seckillctl item resume)" : "",
           rs != starts || re != ends ? " (DIFFERS from the database: 'seckillctl reconcile --fix')" : "");
    ret = itembk_show(p, c, item_id, bk);
fail:
    rp_batch_free(&b);
    rp_close(p);
    return ret;
}

/* The payment window and the orders by status (item_show.sql's columns 7-12). */
static void show_payment(const PGresult *res)
{
    if (strcmp(PQgetvalue(res, 0, 7), "0") == 0) {
        printf("  payment    none: an order is final once persisted\n");
        return;
    }
    printf("  payment    within %s s: pending %s, expired %s, returns not yet in Redis %s, paid %s, "
           "cancelled %s\n",
           PQgetvalue(res, 0, 7), PQgetvalue(res, 0, 8), PQgetvalue(res, 0, 9), PQgetvalue(res, 0, 10),
           PQgetvalue(res, 0, 11), PQgetvalue(res, 0, 12));
}

static int item_show(const struct cfg *c, int64_t item_id)
{
    char sid[24], a[40], b[40];
    const char *params[] = { sid };
    PGconn *pg = NULL;
    PGresult *res = NULL;
    int ret = -1;

    snprintf(sid, sizeof(sid), "%" PRId64, item_id);
    if (!(pg = ctlpg_open(c)) ||
        !(res = ctlpg_exec(pg, embed_item_show, 1, params, PGRES_TUPLES_OK, "read item")))
        goto fail;
    if (PQntuples(res) != 1) {
        printf("item %" PRId64 ": not in the database\n", item_id);
        ret = 1;
        goto fail;
    }
    int64_t starts = ctlpg_i64(res, 0, 3), ends = ctlpg_i64(res, 0, 4);
    printf("item %" PRId64 " \"%s\"\n", item_id, PQgetvalue(res, 0, 0));
    printf("  window     %s .. %s\n", window_end(starts, a, sizeof(a), "(open)"),
           window_end(ends, b, sizeof(b), "(until sold out)"));
    printf("  database   stock_total %s, stock_left %s, sold %s, refused %s%s\n", PQgetvalue(res, 0, 1),
           PQgetvalue(res, 0, 2), PQgetvalue(res, 0, 5), PQgetvalue(res, 0, 6),
           ctlpg_i64(res, 0, 14) == 1 ? ", paused" : "");
    show_payment(res);
    if (stockchg_show(pg, item_id) != 0)
        goto fail;
    if (ctlpg_i64(res, 0, 13) > 0)
        printf("  queue      opens %s (seckillctl queue status --item %" PRId64 ")\n",
               window_end(ctlpg_i64(res, 0, 13), a, sizeof(a), ""), item_id);
    struct itembk bk;
    if (bucket_parse(PQgetvalue(res, 0, 15), bk.salts, &bk.k) != 0) {
        printf("  buckets    the database's '%s' are not salts seckillctl wrote\n", PQgetvalue(res, 0, 15));
        goto fail;
    }
    ret = show_redis(c, item_id, starts, ends, &bk);
fail:
    if (res)
        PQclear(res);
    PQfinish(pg);
    return ret;
}
