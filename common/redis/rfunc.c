#include "rfunc.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What every message about a missing or older library ends with. */
#define RFUNC_HOW "load them: seckillctl functions load (as the admin user; docs/operations.md)"

int rfunc_lib_version(const struct rfunc_lib *lib)
{
    /* The one place the version is written is the library's text, so that
     * the file an operator loads by hand says the same as the binary. */
    static const char mark[] = "\nlocal VERSION = ";
    const char *p = strstr(lib->source, mark);
    if (!p)
        return -1;
    char *end;
    errno = 0;
    long v = strtol(p + sizeof(mark) - 1, &end, 10);
    if (errno || end == p + sizeof(mark) - 1 || *end != '\n' || v < 1 || v > INT32_MAX)
        return -1;
    return (int)v;
}

/* The value of field in a flat map reply (RESP2: name, value, ...). */
static const redisReply *field(const redisReply *m, const char *name)
{
    if (!m || m->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < m->elements; i += 2)
        if (m->element[i]->type == REDIS_REPLY_STRING && strcmp(m->element[i]->str, name) == 0)
            return m->element[i + 1];
    return NULL;
}

/* Does FUNCTION LIST's reply hold the library called name? LIBRARYNAME is a
 * pattern: the exact name is looked for among what it matched. */
static int lists(const redisReply *r, const char *name)
{
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *n = field(r->element[i], "library_name");
        if (n && n->type == REDIS_REPLY_STRING && strcmp(n->str, name) == 0)
            return 1;
    }
    return 0;
}

int rfunc_loaded_version(redisContext *rc, const struct rfunc_lib *lib, int *out, char *err, size_t errlen)
{
    char vfn[64];
    const char *name = lib->name;
    redisReply *r = redisCommand(rc, "FUNCTION LIST LIBRARYNAME %s", name);
    int ret = -1;
    if (!r) {
        snprintf(err, errlen, "redis: FUNCTION LIST: %s", rc->errstr);
        return -1;
    }
    if (r->type != REDIS_REPLY_ARRAY) {
        snprintf(err, errlen, "redis: FUNCTION LIST: %s",
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        goto fail;
    }
    *out = -1;
    if (!lists(r, name)) {
        ret = 0;
        goto fail;
    }
    freeReplyObject(r);
    snprintf(vfn, sizeof(vfn), "%s_version", name);
    if (!(r = redisCommand(rc, "FCALL %s 0", vfn))) {
        snprintf(err, errlen, "redis: FCALL %s: %s", vfn, rc->errstr);
        return -1;
    }
    if (r->type == REDIS_REPLY_INTEGER && r->integer >= 0 && r->integer <= INT32_MAX) {
        *out = (int)r->integer;
        ret = 0;
    } else if (rp_classify(r) == RP_REPLY_NO_FUNCTION) {
        *out = 0; /* a library of that name without a version: older than any */
        ret = 0;
    } else {
        snprintf(err, errlen, "redis: FCALL %s: %s", vfn,
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    }
fail:
    freeReplyObject(r);
    return ret;
}

enum rfunc_status rfunc_check(redisContext *rc, const struct rfunc_lib *lib, char *err, size_t errlen)
{
    int want = rfunc_lib_version(lib), have;
    if (want < 0) {
        snprintf(err, errlen, "the library %s built into this program has no VERSION line", lib->name);
        return RFUNC_MISSING;
    }
    if (rfunc_loaded_version(rc, lib, &have, err, errlen) != 0)
        return RFUNC_UNREACHABLE;
    if (have < 0) {
        snprintf(err, errlen,
                 "the function library %s is not loaded (this program needs version %d); " RFUNC_HOW,
                 lib->name, want);
        return RFUNC_MISSING;
    }
    if (have < want) {
        snprintf(err, errlen,
                 "the function library %s is version %d, older than the %d this program needs; " RFUNC_HOW,
                 lib->name, have, want);
        return RFUNC_MISSING;
    }
    return RFUNC_OK;
}

/* why, as said of primary node: with its address on a Cluster, where the
 * operator must know which shard to mend. */
static void say_at(struct rp *p, int node, const char *why, char *err, size_t errlen)
{
    char name[128];
    if (rp_cluster(p))
        snprintf(err, errlen, "on %s: %s", rp_node_name(p, node, name, sizeof(name)), why);
    else
        snprintf(err, errlen, "%s", why);
}

enum rfunc_status rfunc_check_all(struct rp *p, const struct rfunc_lib *lib, rfunc_node_fn *each, void *arg,
                                  char *err, size_t errlen)
{
    char why[512];
    int asked = 0, missing = 0;
    err[0] = '\0';
    for (int i = 0; i < rp_nodes(p) && !(missing && each == NULL); i++) {
        why[0] = '\0';
        redisContext *rc = rp_node_conn(p, i, why, sizeof(why));
        enum rfunc_status st = rc ? rfunc_check(rc, lib, why, sizeof(why)) : RFUNC_UNREACHABLE;
        if (each != NULL)
            each(arg, &(struct rfunc_node){ .node = i, .st = st, .was = -1, .why = why });
        asked += st != RFUNC_UNREACHABLE;
        /* err: the first missing one, else the first unreachable one */
        if ((st == RFUNC_MISSING && !missing) || (st == RFUNC_UNREACHABLE && err[0] == '\0'))
            say_at(p, i, why, err, errlen);
        missing |= st == RFUNC_MISSING;
    }
    if (missing)
        return RFUNC_MISSING;
    if (asked > 0)
        return RFUNC_OK; /* a Cluster's unreachable primaries passed over: see rfunc.h */
    if (err[0] == '\0')
        snprintf(err, errlen, "redis cluster: no primary known");
    return RFUNC_UNREACHABLE;
}

int rfunc_need_attempt(void *arg, char *err, size_t errlen)
{
    struct rfunc_need *need = arg;
    struct rp *p = NULL;
    int ret = -1;
    need->missing = 0;
    if (rp_open(need->cfg, cfg_role_self(), &p, err, errlen) != 0)
        return -1;
    for (size_t i = 0; i < need->n; i++) {
        enum rfunc_status st = rfunc_check_all(p, need->libs[i], NULL, NULL, need->why, sizeof(need->why));
        if (st == RFUNC_UNREACHABLE) {
            snprintf(err, errlen, "%s", need->why);
            goto fail;
        }
        if (st == RFUNC_MISSING) {
            need->missing = 1;
            break;
        }
    }
    ret = 0;
fail:
    rp_close(p);
    return ret;
}

enum rfunc_status rfunc_load(redisContext *rc, const struct rfunc_lib *lib, int *was, char *err,
                              size_t errlen)
{
    int want = rfunc_lib_version(lib);
    if (want < 0) {
        snprintf(err, errlen, "the library %s built into this program has no VERSION line", lib->name);
        return RFUNC_UNREACHABLE;
    }
    if (rfunc_loaded_version(rc, lib, was, err, errlen) != 0)
        return RFUNC_UNREACHABLE;
    if (*was > want) {
        snprintf(err, errlen,
                 "the function library %s is version %d, newer than this seckillctl's %d: not replaced "
                 "(the newer release's seckillctl loads it)",
                 lib->name, *was, want);
        return RFUNC_NEWER;
    }
    /* REPLACE: one atomic swap, so a daemon's call never finds the library
     * half loaded; a call that runs meanwhile runs whole on the old one. */
    redisReply *r = redisCommand(rc, "FUNCTION LOAD REPLACE %s", lib->source);
    if (!r) {
        snprintf(err, errlen, "redis: FUNCTION LOAD: %s", rc->errstr);
        return RFUNC_UNREACHABLE;
    }
    int ok = r->type == REDIS_REPLY_STRING && strcmp(r->str, lib->name) == 0;
    if (!ok)
        snprintf(err, errlen, "redis: FUNCTION LOAD %s: %s", lib->name,
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    freeReplyObject(r);
    return ok ? RFUNC_OK : RFUNC_UNREACHABLE;
}

int rfunc_load_all(struct rp *p, const struct rfunc_lib *lib, rfunc_node_fn *each, void *arg)
{
    char why[512];
    int ret = 0;
    for (int i = 0; i < rp_nodes(p); i++) {
        int was = -1;
        why[0] = '\0';
        redisContext *rc = rp_node_conn(p, i, why, sizeof(why));
        enum rfunc_status st = rc ? rfunc_load(rc, lib, &was, why, sizeof(why)) : RFUNC_UNREACHABLE;
        each(arg, &(struct rfunc_node){ .node = i, .st = st, .was = was, .why = why });
        ret = st != RFUNC_OK ? -1 : ret;
    }
    return ret;
}

void rfunc_missing_text(const struct rfunc *f, char *buf, size_t len)
{
    snprintf(buf, len, "the function %s is not loaded (library %s, version %d or newer); " RFUNC_HOW, f->name,
             f->lib->name, rfunc_lib_version(f->lib));
}

const char *rfunc_error_text(const struct rfunc *f, const redisContext *rc, const redisReply *r, char *buf,
                             size_t len)
{
    if (!r)
        snprintf(buf, len, "%s", rc->errstr);
    else if (rp_classify(r) == RP_REPLY_NO_FUNCTION)
        rfunc_missing_text(f, buf, len);
    else
        snprintf(buf, len, "%s: %s", f->name, r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    return buf;
}
