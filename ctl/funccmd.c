#include "funccmd.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "funclibs.h"
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

/* What the per-primary answers are said about, and whether any was not
 * fine: the operator's command names every primary and fails when any one
 * is not fine, an unreachable one too (the daemons' check passes those
 * over on a Cluster: rfunc_check_all); that is the tool's question, "does
 * the whole Redis hold them?", not the check's. */
struct said {
    struct rp *p;
    const struct rfunc_lib *lib;
    int failed;
};

/* A primary's answer that went wrong, on stderr. */
static void say_failed(struct said *s, const struct rfunc_node *n)
{
    char at[160];
    fprintf(stderr, "seckillctl%s: %s\n", where(s->p, n->node, at, sizeof(at)), n->why);
    s->failed = 1;
}

static void say_checked(void *arg, const struct rfunc_node *n)
{
    struct said *s = arg;
    char at[160];
    if (n->st != RFUNC_OK)
        say_failed(s, n);
    else
        printf("%s: ok (version %d or newer)%s\n", s->lib->name, rfunc_lib_version(s->lib),
               where(s->p, n->node, at, sizeof(at)));
}

static void say_loaded(void *arg, const struct rfunc_node *n)
{
    struct said *s = arg;
    char at[160];
    if (n->st != RFUNC_OK)
        say_failed(s, n);
    else if (n->was < 0)
        printf("%s: loaded version %d (none before)%s\n", s->lib->name, rfunc_lib_version(s->lib),
               where(s->p, n->node, at, sizeof(at)));
    else
        printf("%s: loaded version %d (was %d)%s\n", s->lib->name, rfunc_lib_version(s->lib),
               n->was, where(s->p, n->node, at, sizeof(at)));
}

/* check: one line per library and primary, what Redis holds against this
 * release's version. load: every library on every primary, each replaced
 * in one step (FUNCTION LOAD REPLACE), never by an older one; replicated,
 * and kept in the RDB and AOF like data: one load on a primary reaches its
 * replicas. 0, or 1 when any line said a failure. */
static int each_library(struct rp *p, bool load)
{
    char err[512];
    struct said s = { .p = p };
    for (const struct rfunc_lib *const *l = funclib_all; *l; l++) {
        s.lib = *l;
        if (load)
            (void)rfunc_load_all(p, s.lib, say_loaded, &s);
        else
            (void)rfunc_check_all(p, s.lib, say_checked, &s, err, sizeof(err));
    }
    return s.failed;
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
    ret = each_library(p, strcmp(argv[1], "load") == 0);
    rp_close(p);
    return ret;
}
