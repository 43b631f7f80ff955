#include "item.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "embed.h"
#include "keys.h"
#include "log.h"
#include "pgconn.h"
#include "rconn.h"
#include "rebuild.h"
#include "script.h"
#include "util.h"

static int pg_ok(PGconn *pg, PGresult *res, ExecStatusType want, const char *what)
{
    if (PQresultStatus(res) == want)
        return 0;
    fprintf(stderr, "seckillctl: %s: %s", what, PQerrorMessage(pg));
    return -1;
}

/* Redis: set the stock unless buyers or reservations exist. 0 or -1. */
static int redis_load(const struct cfg *c, int64_t item_id, int64_t stock)
{
    char k[KEYS_ITEM_PARTS][KEYS_MAX], sstock[24], sid[24], err[256];
    redisContext *rc = NULL;
    redisReply *r = NULL;
    struct script s = SCRIPT_INIT("item_load", embed_item_load);
    int ret = -1;

    if (keys_item_all(k, c->redis.key_prefix, item_id) != 0)
        goto fail;
    snprintf(sstock, sizeof(sstock), "%" PRId64, stock);
    snprintf(sid, sizeof(sid), "%" PRId64, item_id);
    if (rconn_open(c, &rc, err, sizeof(err)) != 0) {
        fprintf(stderr, "seckillctl: %s\n", err);
        goto fail;
    }
    const char *argv[] = { k[KEYS_ITEM_STOCK], k[KEYS_ITEM_BUYERS], k[KEYS_ITEM_PENDING], sstock };
    r = script_eval(rc, &s, 3, 1, argv, NULL);
    if (r == NULL) {
        fprintf(stderr, "seckillctl: redis: %s\n", rc->errstr);
        goto fail;
    }
    if (r->type != REDIS_REPLY_INTEGER) {
        fprintf(stderr, "seckillctl: redis: %s\n", r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        goto fail;
    }
    if (r->integer == -1 || r->integer == -2) {
        fprintf(stderr,
                "seckillctl: item %" PRId64 " has %s in Redis: orders may still be on their way to the "
                "database; refusing to reset its stock\n",
                item_id, r->integer == -1 ? "pending reservations" : "buyers");
        goto fail;
    }
    /* The registry the sweeper walks; outside the script because the key has
     * no item hash tag (Redis Cluster). */
    freeReplyObject(r);
    keys_items(k[0], sizeof(k[0]), c->redis.key_prefix);
    r = redisCommand(rc, "SADD %s %s", k[0], sid);
    if (r == NULL || r->type != REDIS_REPLY_INTEGER) {
        fprintf(stderr, "seckillctl: redis: registering the item: %s\n", r ? r->str : rc->errstr);
        goto fail;
    }
    ret = 0;
fail:
    if (r)
        freeReplyObject(r);
    if (rc)
        redisFree(rc);
    return ret;
}

int item_create(const struct cfg *c, int64_t item_id, int64_t stock, const char *name)
{
    char err[512], sid[24], sstock[24];
    PGconn *pg = NULL;
    PGresult *res = NULL;
    int ret = -1;

    snprintf(sid, sizeof(sid), "%" PRId64, item_id);
    snprintf(sstock, sizeof(sstock), "%" PRId64, stock);
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

    const char *p3[] = { sid, name, sstock };
    res = PQexecParams(pg, embed_item_upsert, 3, NULL, p3, NULL, NULL, 0);
    if (pg_ok(pg, res, PGRES_COMMAND_OK, "insert item") != 0)
        goto fail;
    PQclear(res);

    /* Redis last, inside the open transaction: if Redis refuses, the row is
     * rolled back; if COMMIT then fails, Redis holds stock for an item the
     * database lacks and the command reports it, to be run again. */
    res = NULL;
    if (redis_load(c, item_id, stock) != 0)
        goto fail;
    res = PQexec(pg, "COMMIT");
    if (pg_ok(pg, res, PGRES_COMMAND_OK, "commit (Redis already holds the stock; run the command again)") != 0)
        goto fail;
    ret = 0;
fail:
    if (res)
        PQclear(res);
    PQfinish(pg);
    return ret;
}

static void item_usage(FILE *f)
{
    fputs("usage: seckillctl [-c FILE] item create --id ID --stock N [--name NAME]\n"
          "       seckillctl [-c FILE] item load (--id ID | --all) [--wait-ms N]\n", f);
}

int item_cmd(const struct cfg *c, int argc, char **argv)
{
    static const struct option opts[] = {
        { "id", required_argument, NULL, 'i' },
        { "stock", required_argument, NULL, 's' },
        { "name", required_argument, NULL, 'n' },
        { "all", no_argument, NULL, 'a' },
        { "wait-ms", required_argument, NULL, 'w' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int64_t id = 0, stock = -1, wait_ms = 60000;
    const char *name = "";
    int o, all = 0, load;

    if (argc < 2 || (strcmp(argv[1], "create") != 0 && strcmp(argv[1], "load") != 0)) {
        item_usage(stderr);
        return 2;
    }
    load = strcmp(argv[1], "load") == 0;
    argc--, argv++;
    optind = 1;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (o) {
        case 'i':
            if (util_parse_i64(optarg, 1, INT64_MAX, &id) != 0) {
                fprintf(stderr, "seckillctl: --id must be a positive 64-bit integer, got '%s'\n", optarg);
                return 2;
            }
            break;
        case 's':
            if (util_parse_i64(optarg, 0, INT32_MAX, &stock) != 0) {
                fprintf(stderr, "seckillctl: --stock must be an integer in [0, %d], got '%s'\n", INT32_MAX,
                        optarg);
                return 2;
            }
            break;
        case 'n':
            name = optarg;
            break;
        case 'a':
            all = 1;
            break;
        case 'w':
            if (util_parse_i64(optarg, 0, 3600000, &wait_ms) != 0) {
                fprintf(stderr, "seckillctl: --wait-ms must be an integer in [0, 3600000], got '%s'\n", optarg);
                return 2;
            }
            break;
        case 'h':
            item_usage(stdout);
            return 0;
        default:
            item_usage(stderr);
            return 2;
        }
    }
    if (load) {
        if ((id == 0) == !all || stock >= 0 || name[0] || optind != argc) {
            item_usage(stderr);
            return 2;
        }
        return rebuild_items(c, &id, id ? 1 : 0, all, wait_ms);
    }
    if (id == 0 || stock < 0 || all || optind != argc) {
        item_usage(stderr);
        return 2;
    }
    if (item_create(c, id, stock, name) != 0)
        return 1;
    printf("item %" PRId64 " created: %" PRId64 " units\n", id, stock);
    return 0;
}
