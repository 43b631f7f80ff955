#include "sentinel.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bgthread.h"
#include "log.h"
#include "util.h"

#define WATCH_POLL_MS 250       /* how soon the watcher notices it must stop */
#define WATCH_RETRY_BASE_MS 100
#define WATCH_RETRY_CAP_MS 2000

/* Connect to the Sentinel "host:port" (validated at load), with the
 * configured command timeout: a Sentinel that hangs must not hang us (the
 * watcher reads its subscription only when poll says there is data). */
static redisContext *connect_one(const struct cfg *c, const char *addr, char *err, size_t errlen)
{
    const char *colon = strrchr(addr, ':');
    char host[256];
    snprintf(host, sizeof(host), "%.*s", (int)(colon - addr), addr);
    redisContext *rc = redisConnectWithTimeout(host, atoi(colon + 1),
                                               util_timeval_ms(c->redis.connect_timeout_ms));
    if (rc == NULL || rc->err ||
        redisSetTimeout(rc, util_timeval_ms(c->redis.command_timeout_ms)) != REDIS_OK) {
        snprintf(err, errlen, "sentinel %s: %s", addr,
                 rc ? (rc->err ? rc->errstr : "cannot set timeout") : "out of memory");
        redisFree(rc);
        return NULL;
    }
    return rc;
}

/* The reply of SENTINEL get-master-addr-by-name: ["host", "port"]. */
static int read_addr(const redisReply *r, const char *addr, const char *name, char *host, size_t hostlen,
                     int *port, char *err, size_t errlen)
{
    int64_t p;
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING) {
        if (r && r->type == REDIS_REPLY_NIL)
            snprintf(err, errlen, "sentinel %s: does not monitor a primary named '%s'", addr, name);
        else
            snprintf(err, errlen, "sentinel %s: %s", addr,
                     r && r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        return -1;
    }
    if (util_parse_i64(r->element[1]->str, 1, 65535, &p) != 0 || r->element[0]->len >= hostlen) {
        snprintf(err, errlen, "sentinel %s: bad address in reply", addr);
        return -1;
    }
    memcpy(host, r->element[0]->str, r->element[0]->len + 1);
    *port = (int)p;
    return 0;
}

/* Ask the Sentinel at addr, on a connection of its own, where the primary is. */
static int ask_at(const struct cfg *c, const char *addr, char *host, size_t hostlen, int *port, char *err,
                  size_t errlen)
{
    redisContext *rc = connect_one(c, addr, err, errlen);
    if (rc == NULL)
        return -1;
    redisReply *r = redisCommand(rc, "SENTINEL get-master-addr-by-name %s", c->redis.master_name);
    int rv = -1;
    if (r == NULL)
        snprintf(err, errlen, "sentinel %s: %s", addr, rc->errstr);
    else
        rv = read_addr(r, addr, c->redis.master_name, host, hostlen, port, err, errlen);
    freeReplyObject(r);
    redisFree(rc);
    return rv;
}

int sentinel_ask(const struct cfg *c, char *host, size_t hostlen, int *port, char *err, size_t errlen)
{
    snprintf(err, errlen, "no Sentinel configured");
    for (size_t i = 0; i < c->redis.sentinels.n; i++)
        if (ask_at(c, c->redis.sentinels.v[i], host, hostlen, port, err, errlen) == 0)
            return 0;
    return -1;
}

/* --- the watcher ----------------------------------------------------------- */

static struct {
    const struct cfg *cfg;
    void (*on_switch)(const char *from, const char *to);
    struct bgthread t;
    char primary[300]; /* "host:port" last known; watcher thread only */
} w;

static void note_primary(const char *addr)
{
    if (strcmp(w.primary, addr) == 0)
        return;
    if (w.primary[0] != '\0')
        w.on_switch(w.primary, addr);
    snprintf(w.primary, sizeof(w.primary), "%s", addr);
}

/* A pub/sub message ["message", "+switch-master", "<name> <old-ip> <old-port> <new-ip> <new-port>"]. */
static void on_message(const redisReply *r)
{
    char name[256], oip[128], nip[128];
    int oport, nport;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 || r->element[2]->type != REDIS_REPLY_STRING ||
        strcmp(r->element[0]->str ? r->element[0]->str : "", "message") != 0)
        return;
    if (sscanf(r->element[2]->str, "%255s %127s %d %127s %d", name, oip, &oport, nip, &nport) != 5 ||
        strcmp(name, w.cfg->redis.master_name) != 0)
        return;
    char to[300];
    snprintf(to, sizeof(to), "%s:%d", nip, nport);
    note_primary(to);
}

/* Subscribed on rc: read messages until the connection fails or stop is
 * set. Reads only when poll says there is something, so the blocking
 * context never waits past WATCH_POLL_MS. */
static void listen_switches(redisContext *rc)
{
    while (!bgt_stopping(&w.t)) {
        void *reply = NULL;
        if (redisReaderGetReply(rc->reader, &reply) != REDIS_OK)
            return;
        if (reply) {
            on_message(reply);
            freeReplyObject(reply);
            continue;
        }
        struct pollfd p = { .fd = rc->fd, .events = POLLIN };
        int n = poll(&p, 1, WATCH_POLL_MS);
        if (n > 0 && redisBufferRead(rc) != REDIS_OK)
            return;
    }
}

static void *watch_main(void *arg)
{
    (void)arg;
    const struct cfg *c = w.cfg;
    size_t next = 0;
    int attempt = 0, logged_down = 0;
    while (!bgt_stopping(&w.t)) {
        char err[256], host[256];
        int port;
        const char *addr = c->redis.sentinels.v[next];
        next = (next + 1) % c->redis.sentinels.n;
        redisContext *rc = connect_one(c, addr, err, sizeof(err));
        redisReply *r = NULL;
        /* Subscribe first, then read the address: a switch between the two is
         * then seen in one of them, never in neither. */
        if (rc && (r = redisCommand(rc, "SUBSCRIBE +switch-master")) != NULL) {
            freeReplyObject(r);
            if (ask_at(c, addr, host, sizeof(host), &port, err, sizeof(err)) == 0) {
                char now[300];
                snprintf(now, sizeof(now), "%s:%d", host, port);
                note_primary(now);
                if (logged_down)
                    log_notice("sentinel watch: listening to %s again (primary %s at %s)", addr,
                               c->redis.master_name, w.primary);
                logged_down = 0;
                attempt = 0;
                listen_switches(rc);
                if (!bgt_stopping(&w.t))
                    snprintf(err, sizeof(err), "sentinel %s: %s", addr,
                             rc->err ? rc->errstr : "connection lost");
            }
        } else if (rc) {
            snprintf(err, sizeof(err), "sentinel %s: %s", addr, rc->errstr);
        }
        redisFree(rc);
        if (bgt_stopping(&w.t))
            break;
        if (!logged_down)
            log_warn("sentinel watch: %s; trying the next Sentinel", err);
        logged_down = 1;
        bgt_sleep_ms(&w.t, util_backoff_ms(attempt++, WATCH_RETRY_BASE_MS, WATCH_RETRY_CAP_MS));
    }
    return NULL;
}

int sentinel_watch_start(const struct cfg *c, void (*on_switch)(const char *from, const char *to), char *err,
                         size_t errlen)
{
    if (c->redis.sentinels.n == 0 || w.t.running)
        return 0;
    w.cfg = c;
    w.on_switch = on_switch;
    w.primary[0] = '\0';
    if (bgt_start(&w.t, watch_main, NULL) != 0) {
        snprintf(err, errlen, "sentinel watch: cannot start a thread: %s", strerror(errno));
        return -1;
    }
    return 0;
}

void sentinel_watch_stop(void)
{
    bgt_stop(&w.t);
}
