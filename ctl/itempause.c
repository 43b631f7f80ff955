#include "itempause.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "ctlopt.h"
#include "ctlpg.h"
#include "ctlrp.h"
#include "embed.h"
#include "itembk.h"
#include "keys.h"
#include "util.h"

static void usage(FILE *f)
{
    fputs("usage: seckillctl [-c FILE] item pause --id ID\n"
          "       seckillctl [-c FILE] item resume --id ID\n"
          "While paused, buyers are answered 503 paused with Retry-After (docs/api.md); orders\n"
          "already taken go on.\n",
          f);
}

/* --id ID and nothing else: 0 with *item set, else the exit status. */
static int parse(int argc, char **argv, int64_t *item)
{
    static const struct option opts[] = {
        { "id", required_argument, NULL, 'i' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (o == 'i' && ctl_opt_item_id(optarg, item) == 0)
            continue;
        if (o != 'i')
            usage(o == 'h' ? stdout : stderr);
        return o == 'h' ? 0 : 2;
    }
    if (optind != argc || !*item) {
        usage(stderr);
        return 2;
    }
    return -1;
}

int itempause_cmd(const struct cfg *c, int argc, char **argv)
{
    bool pause = strcmp(argv[0], "pause") == 0;
    char sid[24], window[KEYS_MAX];
    const char *params[] = { sid, pause ? "true" : "false" };
    int64_t item = 0;
    PGconn *pg = NULL;
    PGresult *res = NULL;
    struct rp *p = NULL;
    int ret;

    if ((ret = parse(argc, argv, &item)) >= 0)
        return ret;
    ret = 1;
    snprintf(sid, sizeof(sid), "%" PRId64, item);
    if (keys_item(window, sizeof(window), c->redis.key_prefix, item, KEYS_ITEM_WINDOW) < 0 ||
        !(pg = ctlpg_open(c)) ||
        !(res = ctlpg_exec(pg, embed_item_pause, 2, params, PGRES_TUPLES_OK, pause ? "pause" : "resume")))
        goto fail;
    if (PQntuples(res) != 1) {
        fprintf(stderr, "seckillctl: item %" PRId64 " is not in the database\n", item);
        goto fail;
    }
    if (!(p = ctlrp_open(c)) || ctlrp_pause_window(p, window, pause) != 0 ||
        itembk_copy_window(p, c, item) != 0) {
        fprintf(stderr, "seckillctl: the database says %s, Redis may not yet: run the command again\n",
                pause ? "paused" : "resumed");
        goto fail;
    }
    printf("item %" PRId64 ": sale %s\n", item, pause ? "paused" : "resumed");
    ret = 0;
fail:
    if (res)
        PQclear(res);
    rp_close(p);
    PQfinish(pg);
    return ret;
}
