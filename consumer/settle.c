#include "settle.h"

#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmetrics.h"
#include "keys.h"
#include "log.h"
#include "rconn.h"
#include "rfunc.h"
#include "util.h"

/* Values per order after seckill_settle's first argument. */
#define SETTLE_ARGS 5
/* Keys per seckill_settle call, and its one leading argument (now). */
#define SETTLE_KEYS 4
/* How often an idle worker retries its backlog. */
#define SETTLE_IDLE_RETRY_MS 1000

/* A settled order whose reservation is still to clear, with what became of
 * it (the buyers' status calls read it there). */
struct resv {
    int64_t item, oid, user, reserved_ms;
    int outcome; /* enum cmsg_outcome */
};

struct settle {
    const struct cfg *cfg;
    int id;
    redisContext *rc; /* reopened when broken */
    struct rfunc fn;      /* seckill_settle */
    struct log_repeat say_missing; /* the function missing, once while it lasts */
    struct resv *unclear; /* the backlog, oldest first */
    size_t nunclear, capunclear;
    bool logged;          /* the backlog's warning was logged */
    size_t given_up;      /* reservations dropped beyond the backlog's limit, this outage */
    int64_t retry_ms;     /* monotonic: the next idle retry */
    /* the calls of the clearing under way (settle_start .. settle_finish) */
    const char **argv; /* room for every order's values and a call's keys */
    char (*vals)[24];  /* SETTLE_ARGS strings per order of the backlog */
    size_t capargs;    /* orders argv and vals have room for */
    size_t inflight;   /* calls sent whose replies are still to read */
    bool sent;         /* the first try went out */
    bool failed;       /* no second try: out of memory, or Redis down */
};

int settle_open(const struct cfg *c, int id, struct settle **out, char *err, size_t errlen)
{
    struct settle *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->cfg = c;
    s->id = id;
    s->fn = (struct rfunc)RFUNC_INIT("seckill_settle", RFUNC_LIB_CONSUMER);
    if (rconn_open(c, &s->rc, err, errlen) != 0)
        goto fail;
    *out = s;
    return 0;
fail:
    free(s);
    return -1;
}

void settle_close(struct settle *s)
{
    if (!s)
        return;
    if (s->rc)
        redisFree(s->rc);
    free(s->unclear);
    free(s->argv);
    free(s->vals);
    free(s);
}

static int cmp_resv(const void *a, const void *b)
{
    const struct resv *x = a, *y = b;
    return x->item < y->item ? -1 : x->item > y->item;
}

/* Queue one seckill_settle call per item of s->unclear (sorted by item) and send
 * them all, without waiting for the replies. *cmds: how many. 0, or -1 when
 * Redis failed. */
static int clear_send(struct settle *s, size_t *cmds)
{
    const char *prefix = s->cfg->redis.key_prefix;
    const struct resv *r = s->unclear;
    size_t n = s->nunclear;
    char k[KEYS_ITEM_PARTS][KEYS_MAX], now[24];
    int done = 0;
    *cmds = 0;
    snprintf(now, sizeof(now), "%" PRId64, util_wall_ms());
    for (size_t i = 0; i < n;) {
        size_t j = i, a = 0;
        while (j < n && r[j].item == r[i].item)
            j++;
        if (keys_item_all(k, prefix, r[i].item) != 0)
            return -1;
        s->argv[a++] = k[KEYS_ITEM_PENDING];
        s->argv[a++] = k[KEYS_ITEM_UNPUB];
        s->argv[a++] = k[KEYS_ITEM_ORDERS];
        s->argv[a++] = k[KEYS_ITEM_STOCK];
        s->argv[a++] = now;
        for (size_t m = i; m < j; m++)
            for (int v = 0; v < SETTLE_ARGS; v++)
                s->argv[a++] = s->vals[m * SETTLE_ARGS + (size_t)v];
        /* hiredis copies the arguments into its output buffer here */
        if (rfunc_append(s->rc, &s->fn, SETTLE_KEYS, (int)(a - SETTLE_KEYS), s->argv, NULL) != 0)
            return -1;
        (*cmds)++;
        i = j;
    }
    while (!done)
        if (redisBufferWrite(s->rc, &done) != REDIS_OK)
            return -1;
    return 0;
}

/* Read the replies of cmds calls. 0 when each one cleared its orders. */
static int clear_recv(struct settle *s, size_t cmds)
{
    /* An error reply (LOADING while Redis reads its AOF back) leaves the
     * reservations in place just as a dropped connection does. */
    int ret = 0, missing = 0;
    for (size_t i = 0; i < cmds; i++) {
        redisReply *rep = NULL;
        if (redisGetReply(s->rc, (void **)&rep) != REDIS_OK)
            return -1;
        if (rep->type == REDIS_REPLY_ERROR) {
            missing |= rfunc_is_missing(rep);
            ret = -1;
        }
        freeReplyObject(rep);
    }
    /* The consumer never loads code: it says what is missing, keeps the
     * backlog and retries, until an operator loads the library. */
    if (missing) {
        char why[512];
        rfunc_missing_text(&s->fn, why, sizeof(why));
        log_repeat(&s->say_missing, LOG_LVL_ERROR, "settle: function missing",
                   "worker %d: redis: %s; reservations wait in the backlog (logged once while it lasts)",
                   s->id, why);
    } else if (ret == 0) {
        log_repeat_end(&s->say_missing, "the settle function answered");
    }
    return ret;
}

/* Append the orders of v[0..n) to the backlog. 0, or -1 out of memory. */
static int backlog_add(struct settle *s, struct cmsg *const *v, size_t n)
{
    if (s->nunclear + n > s->capunclear) {
        size_t cap = (s->nunclear + n) * 2;
        struct resv *nr = realloc(s->unclear, cap * sizeof(*nr));
        if (!nr)
            return -1;
        s->unclear = nr;
        s->capunclear = cap;
    }
    for (size_t i = 0; i < n; i++)
        s->unclear[s->nunclear++] = (struct resv){ v[i]->o.item_id, v[i]->o.order_id, v[i]->o.user_id,
                                                   v[i]->o.reserved_at_ms, v[i]->outcome };
    return 0;
}

/* seckill_settle's values of each order: id, user, status letter, reserved at,
 * reason ('' when confirmed). */
static void format_vals(const struct resv *r, size_t n, char (*vals)[24])
{
    for (size_t i = 0; i < n; i++) {
        const char *why = cmsg_reason(r[i].outcome);
        char(*o)[24] = &vals[i * SETTLE_ARGS];
        snprintf(o[0], sizeof(o[0]), "%" PRId64, r[i].oid);
        snprintf(o[1], sizeof(o[1]), "%" PRId64, r[i].user);
        snprintf(o[2], sizeof(o[2]), "%c", cmsg_status(r[i].outcome));
        snprintf(o[3], sizeof(o[3]), "%" PRId64, r[i].reserved_ms);
        snprintf(o[4], sizeof(o[4]), "%s", why ? why : "");
    }
}

/* Room in argv and vals for the whole backlog. 0, or -1 out of memory. */
static int reserve_args(struct settle *s)
{
    size_t n = s->nunclear;
    if (n <= s->capargs)
        return 0;
    const char **argv = realloc(s->argv, (n * SETTLE_ARGS + SETTLE_KEYS + 1) * sizeof(*argv));
    if (argv)
        s->argv = argv;
    char(*vals)[24] = realloc(s->vals, n * SETTLE_ARGS * sizeof(*vals));
    if (vals)
        s->vals = vals;
    if (!argv || !vals)
        return -1;
    s->capargs = n;
    return 0;
}

/* A usable connection: the one there is, or a fresh one when it is broken
 * or fresh is set (it may have gone stale while Redis restarted). 0, or -1
 * when no connection could be opened (Redis is down: no point in trying
 * again at once). */
static int prepare(struct settle *s, bool fresh)
{
    char err[256];
    if (rconn_broken(s->rc) || fresh) {
        if (s->rc)
            redisFree(s->rc);
        s->rc = NULL;
        if (rconn_open(s->cfg, &s->rc, err, sizeof(err)) != 0)
            return -1;
    }
    return 0;
}

/* Keep the backlog for the next call, within SETTLE_BACKLOG_MAX. */
static void backlog_keep(struct settle *s)
{
    if (!s->logged)
        log_warn("worker %d: could not clear %zu reservations of persisted orders in Redis; "
                 "retrying with the next batches", s->id, s->nunclear);
    s->logged = true;
    if (s->nunclear > SETTLE_BACKLOG_MAX) {
        size_t drop = s->nunclear - SETTLE_BACKLOG_MAX;
        /* Every batch of the outage drops some: said once, totalled at the end. */
        if (!s->given_up)
            log_error("worker %d: giving up clearing reservations of persisted orders beyond %d; "
                      "'seckillctl reconcile --fix' drops them (the total when Redis is back)", s->id,
                      SETTLE_BACKLOG_MAX);
        s->given_up += drop;
        memmove(s->unclear, s->unclear + drop, SETTLE_BACKLOG_MAX * sizeof(*s->unclear));
        s->nunclear = SETTLE_BACKLOG_MAX;
    }
}

void settle_start(struct settle *s, struct cmsg *const *v, size_t n)
{
    s->sent = s->failed = false;
    s->inflight = 0;
    if (backlog_add(s, v, n) != 0 || reserve_args(s) != 0) {
        s->failed = true;
        return;
    }
    if (s->nunclear == 0)
        return;
    qsort(s->unclear, s->nunclear, sizeof(*s->unclear), cmp_resv);
    format_vals(s->unclear, s->nunclear, s->vals);
    /* The first try, on the connection as it is. */
    int p = prepare(s, false);
    if (p == 0 && clear_send(s, &s->inflight) == 0) {
        s->sent = true;
        return;
    }
    CM_ADD(redis_errors, 1);
    s->failed = p == -1;
}

void settle_finish(struct settle *s)
{
    size_t cmds;
    bool ok = false;
    if (s->failed) {
        backlog_keep(s);
        return;
    }
    if (s->nunclear == 0)
        return;
    if (s->sent) {
        ok = clear_recv(s, s->inflight) == 0;
        if (!ok)
            CM_ADD(redis_errors, 1);
    }
    /* Once more on a fresh connection: the script is safe to repeat. */
    if (!ok) {
        ok = prepare(s, true) == 0 && clear_send(s, &cmds) == 0 && clear_recv(s, cmds) == 0;
        if (!ok)
            CM_ADD(redis_errors, 1);
    }
    s->sent = false;
    s->inflight = 0;
    if (!ok) {
        backlog_keep(s);
        return;
    }
    if (s->logged)
        log_notice("worker %d: cleared %zu reservations left over from a Redis outage", s->id, s->nunclear);
    if (s->given_up)
        log_notice("worker %d: gave up clearing %zu reservations during the outage; "
                   "'seckillctl reconcile --fix' drops them", s->id, s->given_up);
    s->nunclear = 0;
    s->logged = false;
    s->given_up = 0;
}

void settle_clear(struct settle *s, struct cmsg *const *v, size_t n)
{
    settle_start(s, v, n);
    settle_finish(s);
}

void settle_idle(struct settle *s)
{
    if (s->nunclear == 0 || util_mono_ms() < s->retry_ms)
        return;
    s->retry_ms = util_mono_ms() + SETTLE_IDLE_RETRY_MS;
    settle_clear(s, NULL, 0);
}
