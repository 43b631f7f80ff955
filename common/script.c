#include "script.h"

#include <stdint.h>
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
    if (ok) {
        memcpy(s->sha, r->str, 41);
        log_repeat_end(&s->say, "loaded");
    } else {
        /* Every attempt of a worker retrying with backoff comes here. */
        char key[LOG_REPEAT_KEY_MAX];
        snprintf(key, sizeof(key), "script %s: SCRIPT LOAD failed: %s", s->name,
                 r->type == REDIS_REPLY_ERROR ? r->str : "?");
        log_repeat(&s->say, LOG_LVL_ERROR, key, "%s (said once while it lasts)", key);
    }
    freeReplyObject(r);
    return ok ? 0 : -1;
}

int script_is_noscript(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

/* "EVALSHA sha nkeys args...": on the stack for the usual few arguments, on
 * the heap for long ones (a rebuild passes one argument per buyer). */
#define SCRIPT_STACK_ARGS 64

struct argv_buf {
    const char *sav[SCRIPT_STACK_ARGS];
    size_t sal[SCRIPT_STACK_ARGS];
    const char **av;
    size_t *al;
    char nk[16];
    int n;
};

static int build(const struct script *s, int nkeys, int nargs, const char **argv, const size_t *argvlen,
                 struct argv_buf *b)
{
    int total = nkeys + nargs;
    if (nkeys < 0 || nargs < 0 || total > INT32_MAX - 3)
        return -1;
    b->av = b->sav;
    b->al = b->sal;
    if (total + 3 > SCRIPT_STACK_ARGS) {
        b->av = malloc((size_t)(total + 3) * sizeof(*b->av));
        b->al = malloc((size_t)(total + 3) * sizeof(*b->al));
        if (!b->av || !b->al) {
            free(b->av);
            free(b->al);
            b->av = NULL;
            b->al = NULL;
            return -1;
        }
    }
    snprintf(b->nk, sizeof(b->nk), "%d", nkeys);
    b->av[0] = "EVALSHA", b->al[0] = 7;
    b->av[1] = s->sha, b->al[1] = 40;
    b->av[2] = b->nk, b->al[2] = strlen(b->nk);
    for (int i = 0; i < total; i++) {
        b->av[3 + i] = argv[i];
        b->al[3 + i] = argvlen ? argvlen[i] : strlen(argv[i]);
    }
    b->n = total + 3;
    return 0;
}

static void argv_buf_free(struct argv_buf *b)
{
    if (b->av != b->sav)
        free(b->av);
    if (b->al != b->sal)
        free(b->al);
}

int script_append(redisContext *rc, const struct script *s, int nkeys, int nargs, const char **argv,
                  const size_t *argvlen)
{
    struct argv_buf b;
    if (build(s, nkeys, nargs, argv, argvlen, &b) != 0)
        return -1;
    int ret = redisAppendCommandArgv(rc, b.n, b.av, b.al) == REDIS_OK ? 0 : -1;
    argv_buf_free(&b);
    return ret;
}

redisReply *script_eval(redisContext *rc, struct script *s, int nkeys, int nargs, const char **argv,
                        const size_t *argvlen)
{
    struct argv_buf b;

    if (s->sha[0] == '\0' && script_load(rc, s) != 0)
        return NULL;
    for (int attempt = 0;; attempt++) {
        if (build(s, nkeys, nargs, argv, argvlen, &b) != 0) {
            snprintf(rc->errstr, sizeof(rc->errstr), "out of memory");
            return NULL;
        }
        redisReply *r = redisCommandArgv(rc, b.n, b.av, b.al);
        argv_buf_free(&b);
        if (!script_is_noscript(r) || attempt > 0)
            return r;
        freeReplyObject(r);
        if (script_load(rc, s) != 0)
            return NULL;
    }
}
