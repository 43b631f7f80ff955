#include "funccmd.h"

#include <stdio.h>
#include <string.h>

#include "rconn.h"
#include "rfunc.h"

/* One line per library: what Redis holds against this release's version. */
static int check_all(redisContext *rc)
{
    char err[512];
    int ret = 0;
    for (int l = 0; l < RFUNC_LIBS; l++) {
        int st = rfunc_check(rc, (enum rfunc_lib)l, err, sizeof(err));
        if (st == 0)
            printf("%s: ok (version %d or newer)\n", rfunc_lib_name((enum rfunc_lib)l),
                   rfunc_lib_version((enum rfunc_lib)l));
        else
            fprintf(stderr, "seckillctl: %s\n", err);
        ret |= st != 0;
    }
    return ret;
}

/* Every library, each replaced in one step (FUNCTION LOAD REPLACE), never
 * by an older one. Replicated, and kept in the RDB and AOF like data: one
 * load on the primary reaches its replicas. */
static int load_all(redisContext *rc)
{
    char err[512];
    int ret = 0;
    for (int l = 0; l < RFUNC_LIBS; l++) {
        int was;
        enum rfunc_lib lib = (enum rfunc_lib)l;
        if (rfunc_load(rc, lib, &was, err, sizeof(err)) != 0) {
            fprintf(stderr, "seckillctl: %s\n", err);
            ret = 1;
        } else if (was < 0) {
            printf("%s: loaded version %d (none before)\n", rfunc_lib_name(lib), rfunc_lib_version(lib));
        } else {
            printf("%s: loaded version %d (was %d)\n", rfunc_lib_name(lib), rfunc_lib_version(lib), was);
        }
    }
    return ret;
}

int funccmd(const struct cfg *c, int argc, char **argv)
{
    redisContext *rc = NULL;
    char err[512];
    int ret = 1;
    if (argc != 2 || (strcmp(argv[1], "load") != 0 && strcmp(argv[1], "check") != 0)) {
        fprintf(stderr, "usage: seckillctl functions load|check\n");
        return 2;
    }
    /* As seckillctl's own user (redis.admin_user): the one with
     * +function|load (docs/security.md). */
    if (rconn_open(c, &rc, err, sizeof(err)) != 0) {
        fprintf(stderr, "seckillctl: %s\n", err);
        return 1;
    }
    ret = strcmp(argv[1], "load") == 0 ? load_all(rc) : check_all(rc);
    redisFree(rc);
    return ret;
}
