#include "stockchg.h"

#include <getopt.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctlopt.h"
#include "ctlpg.h"
#include "ctlrp.h"
#include "embed.h"
#include "funclibs.h"
#include "keys.h"
#include "rfunc.h"
#include "util.h"

/* The most units one change moves: the stock is an int32 everywhere else
 * (item create --stock). */
#define STOCKCHG_UNITS_MAX INT32_MAX

bool stockchg_id_ok(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > STOCKCHG_ID_MAX)
        return false;
    return strspn(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-") == n;
}

enum stockchg_result stockchg_redis(struct rp *p, const struct cfg *c, int64_t item, const char *id,
                                    int64_t units, int64_t *stock)
{
    const struct rfunc f = RFUNC_INIT("seckill_stock_change", &funclib_ctl);
    char stock_key[KEYS_MAX], changes[KEYS_MAX], orders[KEYS_MAX], su[24];
    enum stockchg_result ret = STOCKCHG_FAILED;
    redisReply *r = NULL;

    if (keys_item(stock_key, sizeof(stock_key), c->redis.key_prefix, item, KEYS_ITEM_STOCK) < 0 ||
        keys_item(changes, sizeof(changes), c->redis.key_prefix, item, KEYS_ITEM_CHANGES) < 0 ||
        keys_item(orders, sizeof(orders), c->redis.key_prefix, item, KEYS_ITEM_ORDERS) < 0) {
        fprintf(stderr, "seckillctl: redis key prefix too long\n");
        return STOCKCHG_FAILED;
    }
    snprintf(su, sizeof(su), "%" PRId64, units);
    const char *argv[] = { stock_key, changes, orders, id, su };
    if (!(r = ctlrp_fcall(p, &f, true, 3, 2, argv, REDIS_REPLY_ARRAY)))
        return STOCKCHG_FAILED;
    if (r->elements != 2 || r->element[0]->type != REDIS_REPLY_INTEGER ||
        r->element[1]->type != REDIS_REPLY_INTEGER) {
        fprintf(stderr, "seckillctl: redis: seckill_stock_change: unexpected reply\n");
        goto fail;
    }
    *stock = r->element[1]->integer;
    switch (r->element[0]->integer) {
    case 1: ret = STOCKCHG_APPLIED; break;
    case 0: ret = STOCKCHG_ALREADY; break;
    case -1: ret = STOCKCHG_SHORT; break;
    case -2: ret = STOCKCHG_OTHER_CHANGE; break;
    case -3: ret = STOCKCHG_NO_ITEM; break;
    default: fprintf(stderr, "seckillctl: redis: seckill_stock_change: unexpected reply\n");
    }
fail:
    freeReplyObject(r);
    return ret;
}

enum stockchg_result stockchg_pg(PGconn *pg, int64_t item, const char *id, int64_t units)
{
    char sitem[24], su[24];
    snprintf(sitem, sizeof(sitem), "%" PRId64, item);
    snprintf(su, sizeof(su), "%" PRId64, units);
    const char *params[] = { id, sitem, su };
    PGresult *res = ctlpg_exec(pg, embed_stock_change, 3, params, PGRES_TUPLES_OK, "stock change");
    if (!res)
        return STOCKCHG_FAILED;
    enum stockchg_result ret;
    if (ctlpg_i64(res, 0, 0) == 1)
        ret = STOCKCHG_APPLIED;
    else if (!PQgetisnull(res, 0, 2))
        ret = ctlpg_i64(res, 0, 2) == item && ctlpg_i64(res, 0, 3) == units ? STOCKCHG_ALREADY
                                                                           : STOCKCHG_OTHER_CHANGE;
    else
        ret = STOCKCHG_NO_ITEM;
    PQclear(res);
    return ret;
}

int stockchg_restore(PGconn *pg, struct rp *p, const struct cfg *c, int64_t item)
{
    char sid[24], key[KEYS_MAX];
    const char *params[] = { sid };
    struct rp_batch b;
    PGresult *res = NULL;
    int ret = -1;

    rp_batch_init(&b);
    snprintf(sid, sizeof(sid), "%" PRId64, item);
    if (keys_item(key, sizeof(key), c->redis.key_prefix, item, KEYS_ITEM_CHANGES) < 0 ||
        !(res = ctlpg_exec(pg, embed_stock_changes, 1, params, PGRES_TUPLES_OK, "read stock changes")))
        goto fail;
    if (rp_addf(&b, key, "DEL %s", key) < 0)
        goto fail;
    for (int i = 0; i < PQntuples(res); i++)
        if (rp_addf(&b, key, "HSET %s %s %s", key, PQgetvalue(res, i, 0), PQgetvalue(res, i, 1)) < 0)
            goto fail;
    ret = ctlrp_run_durable(p, &b, "restoring the item's stock changes");
fail:
    if (res)
        PQclear(res);
    rp_batch_free(&b);
    return ret;
}

int stockchg_forget(PGconn *pg, struct rp *p, const struct cfg *c, int64_t item)
{
    char sid[24];
    const char *params[] = { sid };
    snprintf(sid, sizeof(sid), "%" PRId64, item);
    PGresult *res = ctlpg_exec(pg, embed_stock_forget, 1, params, PGRES_COMMAND_OK, "forget stock changes");
    if (!res)
        return -1;
    PQclear(res);
    /* The caller's transaction sees its own delete: Redis' record becomes
     * the empty one. */
    return stockchg_restore(pg, p, c, item);
}

int stockchg_show(PGconn *pg, int64_t item)
{
    char sid[24], when[40];
    const char *params[] = { sid };
    int64_t added = 0, withdrawn = 0;
    snprintf(sid, sizeof(sid), "%" PRId64, item);
    PGresult *res = ctlpg_exec(pg, embed_stock_changes, 1, params, PGRES_TUPLES_OK, "read stock changes");
    if (!res)
        return -1;
    int n = PQntuples(res);
    for (int i = 0; i < n; i++) {
        int64_t u = ctlpg_i64(res, i, 1);
        if (u > 0)
            added += u;
        else
            withdrawn -= u;
    }
    if (n > 0) {
        util_format_time_ms(ctlpg_i64(res, n - 1, 2), when, sizeof(when));
        printf("  changes    %d: %" PRId64 " units added, %" PRId64 " withdrawn; the last %s (%+" PRId64
               ") at %s by %s\n",
               n, added, withdrawn, PQgetvalue(res, n - 1, 0), ctlpg_i64(res, n - 1, 1), when,
               PQgetvalue(res, n - 1, 3));
    }
    PQclear(res);
    return 0;
}

/* --- halves, for reconcile ------------------------------------------------- */

static int half_add(struct stockchg_halves *h, const char *id, int64_t units, bool in_pg)
{
    struct stockchg_half *v = realloc(h->v, (h->n + 1) * sizeof(*v));
    if (!v) {
        fprintf(stderr, "seckillctl: out of memory\n");
        return -1;
    }
    h->v = v;
    snprintf(v[h->n].id, sizeof(v[h->n].id), "%s", id);
    v[h->n].units = units;
    v[h->n].in_pg = in_pg;
    h->n++;
    /* PostgreSQL's stock_total moved by units, Redis' stock did not: the
     * sum misses units; the other way round, it has -units too many. */
    h->inflight += in_pg ? units : -units;
    return 0;
}

/* Redis' units for id in the HGETALL reply, or false when absent. */
static bool redis_units(const redisReply *changes, const char *id, int64_t *units)
{
    for (size_t i = 0; i + 1 < changes->elements; i += 2) {
        const redisReply *k = changes->element[i], *v = changes->element[i + 1];
        if (k->type == REDIS_REPLY_STRING && strcmp(k->str, id) == 0)
            return v->type == REDIS_REPLY_STRING && util_parse_i64(v->str, INT64_MIN, INT64_MAX, units) == 0;
    }
    return false;
}

int stockchg_halves(PGconn *pg, int64_t item, const redisReply *changes, struct stockchg_halves *out)
{
    char sid[24];
    const char *params[] = { sid };
    int64_t units;
    int ret = -1;

    memset(out, 0, sizeof(*out));
    snprintf(sid, sizeof(sid), "%" PRId64, item);
    PGresult *res = ctlpg_exec(pg, embed_stock_changes, 1, params, PGRES_TUPLES_OK, "read stock changes");
    if (!res)
        return -1;
    for (int i = 0; i < PQntuples(res); i++)
        if (!redis_units(changes, PQgetvalue(res, i, 0), &units) &&
            half_add(out, PQgetvalue(res, i, 0), ctlpg_i64(res, i, 1), true) != 0)
            goto fail;
    for (size_t i = 0; i + 1 < changes->elements; i += 2) {
        const redisReply *k = changes->element[i];
        bool in_pg = false;
        for (int j = 0; j < PQntuples(res) && !in_pg; j++)
            in_pg = strcmp(PQgetvalue(res, j, 0), k->str) == 0;
        if (!in_pg && redis_units(changes, k->str, &units) && half_add(out, k->str, units, false) != 0)
            goto fail;
    }
    ret = 0;
fail:
    PQclear(res);
    return ret;
}

void stockchg_halves_free(struct stockchg_halves *h)
{
    free(h->v);
    memset(h, 0, sizeof(*h));
}

void stockchg_halves_say(int64_t item, const struct stockchg_halves *h)
{
    for (size_t i = 0; i < h->n; i++)
        printf("  item %" PRId64 ": stock change %s (%+" PRId64 " units) is applied in %s only: its units "
               "are out of the sale until it is finished (the same command again, or --fix)\n",
               item, h->v[i].id, h->v[i].units, h->v[i].in_pg ? "PostgreSQL" : "Redis");
}

int stockchg_finish(PGconn *pg, struct rp *p, const struct cfg *c, int64_t item,
                    const struct stockchg_halves *h)
{
    static const char *const what[] = {
        [STOCKCHG_APPLIED] = "finished",
        [STOCKCHG_ALREADY] = "finished before",
        [STOCKCHG_SHORT] = "too few units free in Redis to withdraw: give them back or make a new change",
        [STOCKCHG_NO_ITEM] = "the item is missing there",
        [STOCKCHG_OTHER_CHANGE] = "the id names another change there",
        [STOCKCHG_FAILED] = "the call failed: run reconcile --fix again",
    };
    for (size_t i = 0; i < h->n; i++) {
        const struct stockchg_half *e = &h->v[i];
        int64_t stock = 0;
        enum stockchg_result r = e->in_pg ? stockchg_redis(p, c, item, e->id, e->units, &stock)
                                          : stockchg_pg(pg, item, e->id, e->units);
        printf("  %s: item %" PRId64 ": stock change %s (%+" PRId64 " units) in %s\n",
               r == STOCKCHG_APPLIED || r == STOCKCHG_ALREADY ? "fixed" : "not fixed", item, e->id, e->units,
               e->in_pg ? "Redis" : "PostgreSQL");
        printf("    %s\n", what[r]);
        if (r == STOCKCHG_FAILED)
            return -1;
    }
    return 0;
}

/* --- the command ------------------------------------------------------------ */

static void usage(FILE *f)
{
    fputs("usage: seckillctl [-c FILE] item add-stock --id ID --units N [--change-id CHANGE]\n"
          "       seckillctl [-c FILE] item withdraw --id ID --units N [--change-id CHANGE]\n"
          "A change is applied once per CHANGE ([A-Za-z0-9._:-], 1 to 64 characters): run the same\n"
          "command again with the same CHANGE after a failure, and the stock changes once. Without\n"
          "--change-id one is made and printed. withdraw takes only units no one holds.\n",
          f);
}

struct chg_args {
    int64_t item, units;
    char id[STOCKCHG_ID_MAX + 1];
};

/* -1 to go on, else the exit status. */
static int parse(int argc, char **argv, struct chg_args *a)
{
    static const struct option opts[] = {
        { "id", required_argument, NULL, 'i' },
        { "units", required_argument, NULL, 'u' },
        { "change-id", required_argument, NULL, 'c' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (o) {
        case 'i':
            if (ctl_opt_item_id(optarg, &a->item) != 0)
                return 2;
            break;
        case 'u':
            if (ctl_opt_range("--units", optarg, 1, STOCKCHG_UNITS_MAX, &a->units) != 0)
                return 2;
            break;
        case 'c':
            if (!stockchg_id_ok(optarg)) {
                fprintf(stderr, "seckillctl: --change-id must be 1 to %d of [A-Za-z0-9._:-], got '%s'\n",
                        STOCKCHG_ID_MAX, optarg);
                return 2;
            }
            snprintf(a->id, sizeof(a->id), "%s", optarg);
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc || !a->item || !a->units) {
        usage(stderr);
        return 2;
    }
    return -1;
}

/* Say why one end did not do its part (nothing when it did). */
static void said(enum stockchg_result r, const char *where, const struct chg_args *a, int64_t stock)
{
    switch (r) {
    case STOCKCHG_APPLIED:
    case STOCKCHG_ALREADY:
    case STOCKCHG_FAILED: /* said where it failed */
        return;
    case STOCKCHG_SHORT:
        fprintf(stderr, "seckillctl: item %" PRId64 ": only %" PRId64 " units are free in Redis (the others "
                "are reserved or sold); nothing withdrawn\n", a->item, stock);
        return;
    case STOCKCHG_NO_ITEM:
        fprintf(stderr, "seckillctl: item %" PRId64 " is not in %s%s; nothing changed there\n", a->item,
                where, strcmp(where, "Redis") == 0 ? " (seckillctl item load --id ID)" : "");
        return;
    case STOCKCHG_OTHER_CHANGE:
        fprintf(stderr, "seckillctl: change %s is recorded in %s for another item or other units: "
                "a change id names one change\n", a->id, where);
        return;
    }
}

/* One end of change a (Redis' with p, else PostgreSQL's), said. */
static enum stockchg_result one_end(const struct cfg *c, PGconn *pg, struct rp *p, const struct chg_args *a,
                                    int64_t units, int64_t *stock)
{
    enum stockchg_result r = p ? stockchg_redis(p, c, a->item, a->id, units, stock)
                               : stockchg_pg(pg, a->item, a->id, units);
    said(r, p ? "Redis" : "PostgreSQL", a, *stock);
    return r;
}

static bool done(enum stockchg_result r)
{
    return r == STOCKCHG_APPLIED || r == STOCKCHG_ALREADY;
}

/* The two ends in the order stockchg.h gives: 0, or -1 after saying why. */
static int apply(const struct cfg *c, const struct chg_args *a, bool add, bool *fresh, int64_t *stock)
{
    int64_t units = add ? a->units : -a->units;
    enum stockchg_result rr = STOCKCHG_FAILED, pr = STOCKCHG_FAILED;
    /* PostgreSQL first for an addition, Redis first for a withdrawal. */
    enum stockchg_result *r1 = add ? &pr : &rr, *r2 = add ? &rr : &pr;
    PGconn *pg = NULL;
    struct rp *p = NULL;
    int ret = -1;

    if (!(pg = ctlpg_open(c)) || !(p = ctlrp_open(c)))
        goto fail;
    struct rp *first = add ? NULL : p, *second = add ? p : NULL;
    if (!done(*r1 = one_end(c, pg, first, a, units, stock)) ||
        !done(*r2 = one_end(c, pg, second, a, units, stock)))
        goto fail;
    *fresh = rr == STOCKCHG_APPLIED || pr == STOCKCHG_APPLIED;
    ret = 0;
fail:
    /* A call that failed may have run (or never connected): running the
     * command again with its id is safe. A refusal changed nothing. */
    if (ret != 0 && (done(rr) || done(pr)))
        fprintf(stderr, "seckillctl: change %s is applied in %s only: run the same command again "
                "(--change-id %s) to finish it; until then its units are out of the sale\n",
                a->id, done(rr) ? "Redis" : "PostgreSQL", a->id);
    else if (ret != 0 && (!p || *r1 == STOCKCHG_FAILED))
        fprintf(stderr, "seckillctl: run it again with --change-id %s: it is applied once\n", a->id);
    rp_close(p);
    PQfinish(pg);
    return ret;
}

int stockchg_cmd(const struct cfg *c, int argc, char **argv)
{
    struct chg_args a = { 0 };
    bool add = strcmp(argv[0], "add-stock") == 0, fresh = false;
    int64_t stock = 0;
    int ret;

    if ((ret = parse(argc, argv, &a)) >= 0)
        return ret;
    if (!a.id[0]) {
        char hex[17];
        if (util_random_hex(hex, 8) != 0) {
            fprintf(stderr, "seckillctl: no randomness for a change id (getrandom)\n");
            return 1;
        }
        snprintf(a.id, sizeof(a.id), "chg-%s", hex);
        printf("change %s\n", a.id);
        fflush(stdout);
    }
    if (apply(c, &a, add, &fresh, &stock) != 0)
        return 1;
    printf("item %" PRId64 ": %" PRId64 " units %s%s (change %s); Redis stock now %" PRId64 "\n", a.item,
           a.units, add ? "added" : "withdrawn", fresh ? "" : " before", a.id, stock);
    return 0;
}
