#include "rconn.h"

#include <stdio.h>
#include <string.h>
#include <sys/time.h>

static struct timeval ms_tv(int ms)
{
    struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
    return tv;
}

static int expect_ok(redisContext *rc, redisReply *r, const char *what, char *err, size_t errlen)
{
    if (r == NULL) {
        snprintf(err, errlen, "redis %s: %s", what, rc->errstr);
        return -1;
    }
    int ok = r->type == REDIS_REPLY_STATUS;
    if (!ok)
        snprintf(err, errlen, "redis %s: %s", what, r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    freeReplyObject(r);
    return ok ? 0 : -1;
}

int rconn_open(const struct cfg *c, redisContext **out, char *err, size_t errlen)
{
    redisContext *rc = redisConnectWithTimeout(c->redis.host, c->redis.port, ms_tv(c->redis.connect_timeout_ms));
    if (rc == NULL) {
        snprintf(err, errlen, "redis %s:%d: out of memory", c->redis.host, c->redis.port);
        return -1;
    }
    if (rc->err) {
        snprintf(err, errlen, "redis %s:%d: %s", c->redis.host, c->redis.port, rc->errstr);
        goto fail;
    }
    if (redisSetTimeout(rc, ms_tv(c->redis.command_timeout_ms)) != REDIS_OK) {
        snprintf(err, errlen, "redis %s:%d: cannot set timeout", c->redis.host, c->redis.port);
        goto fail;
    }
    if (c->redis.password[0] != '\0' &&
        expect_ok(rc, redisCommand(rc, "AUTH %s", c->redis.password), "AUTH", err, errlen) != 0)
        goto fail;
    if (c->redis.db != 0 && expect_ok(rc, redisCommand(rc, "SELECT %d", c->redis.db), "SELECT", err, errlen) != 0)
        goto fail;
    *out = rc;
    return 0;
fail:
    redisFree(rc);
    return -1;
}

int rconn_broken(const redisContext *rc)
{
    return rc == NULL || rc->err != 0;
}

void rconn_discard_replies(redisContext *rc, int n)
{
    for (int i = 0; i < n; i++) {
        redisReply *r = NULL;
        if (redisGetReply(rc, (void **)&r) != REDIS_OK)
            return;
        freeReplyObject(r);
    }
}
