/* bench/zipfitems: create COUNT items FIRST .. FIRST+COUNT-1 of STOCK units
 * each for bench/zipf, in one process: what `seckillctl item create` does for
 * one item (lock the row, refuse an item with orders, upsert it, load its
 * stock into Redis with seckill_item_load, register it, commit last), for all of
 * them over one PostgreSQL transaction and one Redis pipeline. Run one
 * `item create` each, the 1,000 items of a run took 22.6 s on this machine
 * (eight at a time, under other load); this takes a fraction of a second.
 * The same embedded SQL and Lua as the command, so the items are the same.
 * No sale window: the items are on sale at once, until sold out. If Redis
 * refuses one, the rows roll back but the items loaded before it keep their
 * keys: bench/zipf deletes its prefix's keys either way.
 *   build/bench/zipfitems CONFIG FIRST COUNT STOCK NAME   (bench/zipf runs it) */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cfg.h"
#include "embed.h"
#include "funclibs.h"
#include "keys.h"
#include "pgconn.h"
#include "rpipe.h"
#include "rfunc.h"
#include "util.h"

#define COUNT_MAX 100000

/* res has status want, else say what failed. 0 or -1. */
static int pg_ok(PGconn *pg, const PGresult *res, ExecStatusType want, const char *what)
{
    if (res && PQresultStatus(res) == want)
        return 0;
    fprintf(stderr, "zipfitems: %s: %s", what, PQerrorMessage(pg));
    return -1;
}

/* A command that must succeed; takes res. 0 or -1. */
static int pg_cmd(PGconn *pg, PGresult *res, ExecStatusType want, const char *what)
{
    int ret = pg_ok(pg, res, want, what);
    PQclear(res);
    return ret;
}

/* Lock and upsert every item, refusing any that has orders. 0 or -1. */
static int pg_items(PGconn *pg, int64_t first, int64_t count, const char *stock, const char *name)
{
    char sid[24];
    /* no payment window, no waiting room, no buckets */
    const char *p[] = { sid, name, stock, NULL, NULL, "0", NULL, "" };
    for (int64_t id = first; id < first + count; id++) {
        snprintf(sid, sizeof(sid), "%" PRId64, id);
        PGresult *res = PQexecParams(pg, embed_item_orders, 1, NULL, p, NULL, NULL, 0);
        if (pg_ok(pg, res, PGRES_TUPLES_OK, "count orders") != 0) {
            PQclear(res);
            return -1;
        }
        int has = strcmp(PQgetvalue(res, 0, 0), "0") != 0;
        PQclear(res);
        if (has) {
            fprintf(stderr, "zipfitems: item %s already has orders; refusing to overwrite it\n", sid);
            return -1;
        }
        if (pg_cmd(pg, PQexecParams(pg, embed_item_upsert, 8, NULL, p, NULL, NULL, 0), PGRES_COMMAND_OK,
                   "insert item") != 0)
            return -1;
    }
    return 0;
}

/* The library on every primary (a Cluster's shards hold their own). */
static int check_functions(struct rp *p)
{
    char err[512];
    if (rfunc_check_all(p, &funclib_ctl, NULL, NULL, err, sizeof(err)) != RFUNC_OK) {
        fprintf(stderr, "zipfitems: %s\n", err);
        return -1;
    }
    return 0;
}

/* seckill_item_load for every item in one batch (on a Cluster, one round
 * trip per shard), then one SADD to the registry. 0 or -1. */
static int redis_items(const struct cfg *c, int64_t first, int64_t count, const char *stock)
{
    char k[KEYS_ITEM_PARTS][KEYS_MAX], reg[KEYS_MAX], err[256];
    const struct rfunc s = RFUNC_INIT("seckill_item_load", &funclib_ctl);
    struct rp *p = NULL;
    struct rp_batch b;
    const char **sadd = NULL;
    char(*ids)[24] = NULL;
    int ret = -1;

    rp_batch_init(&b);
    if (rp_open(c, CFG_ROLE_ADMIN, &p, err, sizeof(err)) != 0) {
        fprintf(stderr, "zipfitems: %s\n", err);
        goto fail;
    }
    if (check_functions(p) != 0)
        goto fail;
    if (!(ids = calloc((size_t)count, sizeof(*ids))) || !(sadd = calloc((size_t)count + 2, sizeof(*sadd)))) {
        fprintf(stderr, "zipfitems: out of memory\n");
        goto fail;
    }
    for (int64_t i = 0; i < count; i++) {
        snprintf(ids[i], sizeof(ids[i]), "%" PRId64, first + i);
        if (keys_item_all(k, c->redis.key_prefix, first + i) != 0)
            goto fail;
        const char *argv[] = { k[KEYS_ITEM_STOCK], k[KEYS_ITEM_BUYERS], k[KEYS_ITEM_PENDING], k[KEYS_ITEM_WINDOW],
                               k[KEYS_ITEM_ORDERS], stock, "", "" };
        if (rp_fcall(&b, s.name, 5, 3, argv, NULL) < 0)
            goto fail;
    }
    if (rp_run(p, &b, err, sizeof(err)) != 0) {
        fprintf(stderr, "zipfitems: redis: %s\n", err);
        goto fail;
    }
    for (int64_t i = 0; i < count; i++) {
        const redisReply *r = rp_reply(&b, (int)i);
        if (r->type != REDIS_REPLY_INTEGER || r->integer != 1) {
            fprintf(stderr, "zipfitems: item %s: %s\n", ids[i],
                    r->type == REDIS_REPLY_ERROR     ? r->str
                    : r->type == REDIS_REPLY_INTEGER ? "Redis holds buyers or reservations of it"
                                                     : "unexpected reply");
            goto fail;
        }
    }
    /* The registry the sweeper walks; apart, as the command does: the key
     * has no item hash tag (Redis Cluster). */
    keys_items(reg, sizeof(reg), c->redis.key_prefix);
    sadd[0] = "SADD";
    sadd[1] = reg;
    for (int64_t i = 0; i < count; i++)
        sadd[i + 2] = ids[i];
    rp_batch_reset(&b);
    rp_add(&b, reg, (int)count + 2, sadd, NULL);
    if (rp_run(p, &b, err, sizeof(err)) != 0 || rp_reply(&b, 0)->type != REDIS_REPLY_INTEGER) {
        fprintf(stderr, "zipfitems: redis: registering the items: %s\n",
                err[0] ? err : rp_reply(&b, 0)->type == REDIS_REPLY_ERROR ? rp_reply(&b, 0)->str : "unexpected reply");
        goto fail;
    }
    ret = 0;
fail:
    rp_batch_free(&b);
    free(ids);
    free(sadd);
    rp_close(p);
    return ret;
}

int main(int argc, char **argv)
{
    struct cfg c = { 0 };
    PGconn *pg = NULL;
    char err[512];
    int64_t first, count, stock;
    int ret = 1;

    if (argc != 6 || util_parse_i64(argv[2], 1, INT64_MAX - COUNT_MAX, &first) != 0 ||
        util_parse_i64(argv[3], 1, COUNT_MAX, &count) != 0 ||
        util_parse_i64(argv[4], 0, INT32_MAX, &stock) != 0) {
        fprintf(stderr, "usage: zipfitems CONFIG FIRST COUNT(1-%d) STOCK NAME\n", COUNT_MAX);
        return 2;
    }
    if (cfg_load(argv[1], &c, err, sizeof(err)) != 0 ||
        pgconn_open(&c, "zipfitems", &pg, err, sizeof(err)) != 0) {
        fprintf(stderr, "zipfitems: %s\n", err);
        goto fail;
    }
    if (pg_cmd(pg, PQexec(pg, "BEGIN"), PGRES_COMMAND_OK, "begin") != 0 ||
        pg_items(pg, first, count, argv[4], argv[5]) != 0)
        goto fail;
    /* Redis last, inside the open transaction, as the command does: if Redis
     * refuses, the rows roll back. */
    if (redis_items(&c, first, count, argv[4]) != 0 ||
        pg_cmd(pg, PQexec(pg, "COMMIT"), PGRES_COMMAND_OK, "commit (Redis already holds the stock)") != 0)
        goto fail;
    printf("%" PRId64 " items created: %" PRId64 " .. %" PRId64 ", %" PRId64 " units each\n", count, first,
           first + count - 1, stock);
    ret = 0;
fail:
    PQfinish(pg);
    cfg_free(&c);
    return ret;
}
