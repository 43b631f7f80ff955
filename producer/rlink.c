#include "rlink.h"

#include "backoff.h"
#include "log.h"
#include "pmetrics.h"
#include "rconn.h"
#include "util.h"

void rlink_down(struct rlink *l, const char *why)
{
    PM_INC(redis_errors);
    if (!l->down && l->meanwhile)
        log_error("redis: %s; %s until it is back", why, l->meanwhile);
    else if (!l->down)
        log_error("redis: %s; %s are refused (503) until it is back", why, l->what);
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
    if (l->rc)
        rlink_down(l, l->rc->errstr[0] ? l->rc->errstr : "connection broken");
    now = util_mono_ms();
    if (now < l->next_connect_ms)
        return 0;
    if (rconn_open(l->cfg, &l->rc, err, sizeof(err)) != 0) {
        l->rc = NULL;
        return retry_later(l, now, err);
    }
    if (l->prepare && l->prepare(l->rc, l->arg, err, sizeof(err)) != 0)
        return retry_later(l, now, err);
    if (l->down && l->meanwhile)
        log_notice("redis: connected again; %s resume", l->what);
    else if (l->down)
        log_notice("redis: connected again; %s are taken again", l->what);
    l->down = 0;
    l->attempt = 0;
    if (l->report_up)
        PM_SET(redis_up, 1);
    return 1;
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
