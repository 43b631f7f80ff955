#include "rlink.h"

#include <stdio.h>

#include "backoff.h"
#include "log.h"
#include "pmetrics.h"
#include "util.h"

/* What the owner does without Redis, for the log. */
static void say_down(const struct rlink *l, char *buf, size_t len)
{
    if (l->meanwhile)
        snprintf(buf, len, "%s", l->meanwhile);
    else
        snprintf(buf, len, "%s are refused (503)", l->what);
}

void rlink_down(struct rlink *l, const char *why)
{
    char meanwhile[128], key[LOG_REPEAT_KEY_MAX];
    PM_INC(redis_errors);
    say_down(l, meanwhile, sizeof(meanwhile));
    if (!l->down && l->fresh && (l->announced || l->flap.times)) {
        /* Said to be back, then failed before anything worked: the outage
         * goes on, however often the connect itself succeeds. */
        snprintf(key, sizeof(key), "redis: %s right after connecting", why);
        log_repeat(&l->flap, LOG_LVL_ERROR, key, "%s; %s until it is back (said once while it lasts)", key,
                   meanwhile);
    } else if (!l->down) {
        log_error("redis: %s; %s until it is back", why, meanwhile);
    }
    /* The rpipe closed what it could not use; what must be done again is
     * prepare, at the next rlink_ok(). */
    l->down = 1;
    l->prepared = 0;
    if (l->report_up)
        PM_SET(redis_up, 0);
}

/* A failed attempt: the next one after the backoff. */
static int retry_later(struct rlink *l, int64_t now, const char *why)
{
    l->next_connect_ms = now + util_backoff_ms(l->attempt++, REDIS_RECONNECT_BASE_MS, REDIS_RECONNECT_CAP_MS);
    rlink_down(l, why);
    return 0;
}

/* Open the rpipe if need be, reconnect one node, prepare. RFUNC_OK, or
 * prepare's status or RFUNC_UNREACHABLE with err. */
static enum rfunc_status connect_prepare(struct rlink *l, char *err, size_t errlen)
{
    if (!l->rp && rp_open(l->cfg, cfg_role_self(), &l->rp, err, errlen) != 0) {
        l->rp = NULL;
        return RFUNC_UNREACHABLE;
    }
    /* One node: connect now, not at the next run, so that prepare and the
     * requests see the same connection. (A Cluster's connections open per
     * node as its commands need them.) */
    if (!rp_cluster(l->rp) && !rp_node_conn(l->rp, 0, err, errlen))
        return RFUNC_UNREACHABLE;
    enum rfunc_status st = l->prepare ? l->prepare(l->rp, l->arg, err, errlen) : RFUNC_OK;
    if (st != RFUNC_OK)
        return st;
    l->epoch = rp_epoch(l->rp);
    l->prepared = 1;
    return RFUNC_OK;
}

enum rfunc_status rlink_open(struct rlink *l, char *err, size_t errlen)
{
    enum rfunc_status st = connect_prepare(l, err, errlen);
    if (st == RFUNC_OK) {
        l->down = 0;
        if (l->report_up)
            PM_SET(redis_up, 1);
    }
    return st;
}

int rlink_ok(struct rlink *l)
{
    char err[512];
    if (l->rp && l->prepared && !l->down && rp_connected(l->rp) && rp_epoch(l->rp) == l->epoch)
        return 1;
    /* Down, or a new connection or slot map is due: a Sentinel switch, a
     * READONLY any thread saw, a Cluster's map read again. Not down, that is
     * no failure of this link's, so nothing is said; prepare runs again on
     * what the rpipe connects to now. A command refused there says so
     * itself (rlink_down from the owner). */
    int64_t now = util_mono_ms();
    if (now < l->next_connect_ms)
        return 0;
    if (connect_prepare(l, err, sizeof(err)) != RFUNC_OK)
        return retry_later(l, now, err);
    /* While connections keep failing at once, a connect is no news. */
    l->announced = l->down && !l->flap.times;
    if (l->announced && l->meanwhile)
        log_notice("redis: connected again; %s resume", l->what);
    else if (l->announced)
        log_notice("redis: connected again; %s are taken again", l->what);
    l->down = 0;
    l->fresh = 1;
    l->attempt = 0;
    if (l->report_up)
        PM_SET(redis_up, 1);
    return 1;
}

/* A Cluster that got no answer to a batch: is some primary still there (a
 * connection open, or one that opens)? The batch may have touched only the
 * shard that failed. */
static int some_primary(struct rp *p)
{
    char err[256];
    for (int i = 0; i < rp_nodes(p); i++)
        if (rp_node_conn(p, i, err, sizeof(err)) != NULL)
            return 1;
    return 0;
}

/* A run failed (err says the first reason): down, or one shard's failure. */
static void run_failed(struct rlink *l, const struct rp_batch *b, const char *err)
{
    int answered = 0;
    for (int i = 0; i < b->n && !answered; i++)
        answered = rp_status(b, i) == RP_OK;
    if (!rp_cluster(l->rp) || (!answered && !some_primary(l->rp))) {
        rlink_down(l, err[0] ? err : "no reply");
        return;
    }
    char key[LOG_REPEAT_KEY_MAX], meanwhile[128];
    l->shard_clean_ms = 0;
    PM_INC(redis_errors);
    say_down(l, meanwhile, sizeof(meanwhile));
    snprintf(key, sizeof(key), "redis: %.140s", err);
    log_repeat(&l->shard, LOG_LVL_ERROR, key,
               "%s; on the shards that fail, %s until they are back (said once "
               "while it lasts)",
               key, meanwhile);
}

int rlink_run(struct rlink *l, struct rp_batch *b)
{
    char err[512];
    if (l->count_trips)
        PM_INC(redis_roundtrips);
    if (rp_run(l->rp, b, err, sizeof(err)) != 0) {
        run_failed(l, b, err);
        return -1;
    }
    if (l->shard.times > 0) {
        int64_t now = util_mono_ms();
        if (l->shard_clean_ms == 0)
            l->shard_clean_ms = now;
        else if (now - l->shard_clean_ms >= RLINK_SHARD_CLEAN_MS)
            log_repeat_end(&l->shard, "every shard answers");
    }
    return 0;
}

redisReply *rlink_call(struct rlink *l, const char *key, int argc, const char **argv)
{
    struct rp_batch b;
    redisReply *r = NULL;
    rp_batch_init(&b);
    if (rp_add(&b, key, argc, argv, NULL) < 0)
        rlink_down(l, "out of memory");
    else if (rlink_run(l, &b) == 0)
        r = rp_take(&b, 0);
    rp_batch_free(&b);
    return r;
}

void rlink_worked(struct rlink *l)
{
    if (!l->fresh)
        return;
    l->fresh = 0;
    log_repeat_end(&l->flap, l->meanwhile ? "a command worked; resumed" : "a command worked; taken again");
}

void rlink_retry_now(struct rlink *l)
{
    l->next_connect_ms = 0;
}

void rlink_close(struct rlink *l)
{
    rp_close(l->rp);
    l->rp = NULL;
    l->prepared = 0;
}
