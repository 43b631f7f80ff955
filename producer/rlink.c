#include "rlink.h"

#include "backoff.h"
#include "log.h"
#include "pmetrics.h"
#include "rconn.h"
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
    if (l->rc) {
        redisFree(l->rc);
        l->rc = NULL;
    }
    l->down = 1;
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

int rlink_ok(struct rlink *l)
{
    char err[512];
    int64_t now;
    if (l->rc && !rconn_broken(l->rc))
        return 1;
    if (l->rc && l->rc->err) {
        rlink_down(l, l->rc->errstr[0] ? l->rc->errstr : "connection broken");
    } else if (l->rc) {
        /* Sound, but opened before the primary moved (a Sentinel switch,
         * or a READONLY any thread saw): no failure of this link's, so
         * nothing to say; it reconnects to the primary of now. A write
         * refused there says so itself (rlink_down from the owner). Said
         * here, a link that only reads would flap in the log once per
         * READONLY of another thread. */
        redisFree(l->rc);
        l->rc = NULL;
    }
    now = util_mono_ms();
    if (now < l->next_connect_ms)
        return 0;
    if (rconn_open(l->cfg, &l->rc, err, sizeof(err)) != 0) {
        l->rc = NULL;
        return retry_later(l, now, err);
    }
    if (l->prepare && l->prepare(l->rc, l->arg, err, sizeof(err)) != 0)
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
    if (l->rc)
        redisFree(l->rc);
    l->rc = NULL;
}
