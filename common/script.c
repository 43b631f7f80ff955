#include "script.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

int script_load(redisContext *rc, struct script *s)
{
    redisReply *r = redisCommand(rc, "SCRIPT LOAD %s", s->source);
    if (r == NULL) {
        log_debug("script %s: SCRIPT LOAD: %s", s->name, rc->errstr);
        return -1;
    }
    int ok = r->type == REDIS_REPLY_STRING && r->len == 40;
    if (ok)
        memcpy(s->sha, r->str, 41);
    else
        log_error("script %s: SCRIPT LOAD failed: %s", s->name, r->type == REDIS_REPLY_ERROR ? r->str : "?");
    freeReplyObject(r);
    return ok ? 0 : -1;
}

int script_is_noscript(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

/* Build "EVALSHA sha nkeys args..." into the caller's arrays. */
#define SCRIPT_MAX_ARGS 64

static int build(const struct script *s, int nkeys, int nargs, const char **argv, const size_t *argvlen,
                 const char **av, size_t *al, char *nk, size_t nksz)
{
    int total = nkeys + nargs;
    if (total + 3 > SCRIPT_MAX_ARGS)
        return -1;
    snprintf(nk, nksz, "%d", nkeys);
    av[0] = "EVALSHA", al[0] = 7;
    av[1] = s->sha, al[1] = 40;
    av[2] = nk, al[2] = strlen(nk);
    for (int i = 0; i < total; i++) {
        av[3 + i] = argv[i];
        al[3 + i] = argvlen ? argvlen[i] : strlen(argv[i]);
    }
    return total + 3;
}

int script_append(redisContext *rc, const struct script *s, int nkeys, int nargs, const char **argv,
                  const size_t *argvlen)
{
    const char *av[SCRIPT_MAX_ARGS];
    size_t al[SCRIPT_MAX_ARGS];
    char nk[16];
    int n = build(s, nkeys, nargs, argv, argvlen, av, al, nk, sizeof(nk));
    if (n < 0)
        return -1;
    return redisAppendCommandArgv(rc, n, av, al) == REDIS_OK ? 0 : -1;
}

redisReply *script_eval(redisContext *rc, struct script *s, int nkeys, int nargs, const char **argv,
                        const size_t *argvlen)
{
    const char *av[SCRIPT_MAX_ARGS];
    size_t al[SCRIPT_MAX_ARGS];
    char nk[16];

    if (s->sha[0] == '\0' && script_load(rc, s) != 0)
        return NULL;
    for (int attempt = 0;; attempt++) {
        int n = build(s, nkeys, nargs, argv, argvlen, av, al, nk, sizeof(nk));
        if (n < 0)
            return NULL;
        redisReply *r = redisCommandArgv(rc, n, av, al);
        if (!script_is_noscript(r) || attempt > 0)
            return r;
        freeReplyObject(r);
        if (script_load(rc, s) != 0)
            return NULL;
    }
}
