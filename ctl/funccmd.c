#include "funccmd.h"

#include <stdio.h>
#include <string.h>

#include "rfunc.h"
#include "rpipe.h"

/* " on HOST:PORT" on a Redis Cluster, whose primaries each hold their own
 * copy of the functions (rfunc.h); "" on one Redis, where that says nothing. */
static const char *where(const struct rp *p, int node, char *buf, size_t len)
{
    char name[128];
    if (!rp_cluster(p))
        return "";
    snprintf(buf, len, " on %s", rp_node_name(p, node, name, sizeof(name)));
    return buf;
}

/* One line per library and primary: what Redis holds against this
 * release's version. */
static int check_all(struct rp *p)
{
    char err[512], at[160];
    int ret = 0;
    for (int l = 0; l < RFUNC_LIBS; l++) {
        enum rfunc_lib lib = (enum rfunc_lib)l;
        for (int i = 0; i < rp_nodes(p); i++) {
            redisContext *rc = rp_node_conn(p, i, err, sizeof(err));
            int st = rc ? rfunc_check(rc, lib, err, sizeof(err)) : -1;
            if (st == 0)
                printf("%s: ok (version %d or newer)%s\n", rfunc_lib_name(lib), rfunc_lib_version(lib),
                       where(p, i, at, sizeof(at)));
            else
                fprintf(stderr, "seckillctl%s: %s\n", where(p, i, at, sizeof(at)), err);
            ret |= st != 0;
        }
    }
    return ret;
}

/* Every library on every primary, each replaced in one step (FUNCTION LOAD
 * REPLACE), never by an older one. Replicated, and kept in the RDB and AOF
 * like data: one load on a primary reaches its replicas. */
static int load_all(struct rp *p)
{
    char err[512], at[160];
    int ret = 0;
    for (int l = 0; l < RFUNC_LIBS; l++) {
        enum rfunc_lib lib = (enum rfunc_lib)l;
        for (int i = 0; i < rp_nodes(p); i++) {
            int was;
            redisContext *rc = rp_node_conn(p, i, err, sizeof(err));
            if (!rc || rfunc_load(rc, lib, &was, err, sizeof(err)) != 0) {
                fprintf(stderr, "seckillctl%s: %s\n", where(p, i, at, sizeof(at)), err);
                ret = 1;
            } else if (was < 0) {
                printf("%s: loaded version %d (none before)%s\n", rfunc_lib_name(lib), rfunc_lib_version(lib),
                       where(p, i, at, sizeof(at)));
            } else {
                printf("%s: loaded version %d (was %d)%s\n", rfunc_lib_name(lib), rfunc_lib_version(lib), was,
                       where(p, i, at, sizeof(at)));
            }
        }
    }
    return ret;
}

int funccmd(const struct cfg *c, int argc, char **argv)
{
    struct rp *p = NULL;
    char err[512];
    int ret = 1;
    if (argc != 2 || (strcmp(argv[1], "load") != 0 && strcmp(argv[1], "check") != 0)) {
        fprintf(stderr, "usage: seckillctl functions load|check\n");
        return 2;
    }
    /* As seckillctl's own user (redis.admin_user): the one with
     * +function|load (docs/security.md). On a Cluster, every primary of the
     * slot map. */
    if (rp_open(c, cfg_role_self(), &p, err, sizeof(err)) != 0) {
        fprintf(stderr, "seckillctl: %s\n", err);
        return 1;
    }
    ret = strcmp(argv[1], "load") == 0 ? load_all(p) : check_all(p);
    rp_close(p);
    return ret;
}
