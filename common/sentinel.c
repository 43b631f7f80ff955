#include "sentinel.h"

#include <hiredis/hiredis.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "log.h"
#include "util.h"

#define WATCH_POLL_MS 250       /* how soon the watcher notices it must stop */
#define WATCH_RETRY_BASE_MS 100
#define WATCH_RETRY_CAP_MS 2000

static struct timeval ms_tv(int ms)
{
    struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
    return tv;
}

/* Connect to the Sentinel "host:port" (validated at load). */
static redisContext *connect_one(const struct cfg *c, const char *addr, char *err, size_t errlen)
{
    const char *colon = strrchr(addr, ':');
    char host[256];
    snprintf(host, sizeof(host), "%.*s", (int)(colon - addr), addr);
    redisContext *rc = redisConnectWithTimeout(host, atoi(colon + 1), ms_tv(c->redis.connect_timeout_ms));
    if (rc == NULL || rc->err) {
        snprintf(err, errlen, "sentinel %s: %s", addr, rc ? rc->errstr : "out of memory");
        redisFree(rc);
        return NULL;
    }
    return rc;
}

/* The reply of SENTINEL get-master-addr-by-name: ["host", "port"]. */
static int read_addr(const redisReply *r, const char *addr, const char *name, char *host, size_t hostlen,
                     int *port, char *err, size_t errlen)
{
    long p;
    char *end;
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_STRING) {
        if (r && r->type == REDIS_REPLY_NIL)
            snprintf(err, errlen, "sentinel %s: does not monitor a primary named '%s'", addr, name);
        else
            snprintf(err, errlen, "sentinel %s: %s", addr, r && r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        return -1;
    }
    p = strtol(r->element[1]->str, &end, 10);
    if (*end != '\0' || p < 1 || p > 65535 || r->element[0]->len >= hostlen) {
        snprintf(err, errlen, "sentinel %s: bad address in reply", addr);
        return -1;
    }
    memcpy(host, r->element[0]->str, r->element[0]->len + 1);
    *port = (int)p;
    return 0;
}

static int ask_one(const struct cfg *c, redisContext *rc, const char *addr, char *host, size_t hostlen, int *port,
                   char *err, size_t errlen)
{
    redisReply *r = redisCommand(rc, "SENTINEL get-master-addr-by-name %s", c->redis.master_name);
    if (r == NULL) {
        snprintf(err, errlen, "sentinel %s: %s", addr, rc->errstr);
        return -1;
    }
    int rv = read_addr(r, addr, c->redis.master_name, host, hostlen, port, err, errlen);
    freeReplyObject(r);
    return rv;
}

int sentinel_ask(const struct cfg *c, char *host, size_t hostlen, int *port, char *err, size_t errlen)
{
    snprintf(err, errlen, "no Sentinel configured");
    for (size_t i = 0; i < c->redis.sentinels.n; i++) {
        const char *addr = c->redis.sentinels.v[i];
        redisContext *rc = connect_one(c, addr, err, errlen);
        if (rc == NULL)
            continue;
        int rv = redisSetTimeout(rc, ms_tv(c->redis.command_timeout_ms)) == REDIS_OK
                     ? ask_one(c, rc, addr, host, hostlen, port, err, errlen)
                     : -1;
        redisFree(rc);
        if (rv == 0)
            return 0;
    }
    return -1;
}

/* --- the watcher ----------------------------------------------------------- */

static struct {
    const struct cfg *cfg;
    void (*on_switch)(const char *from, const char *to);
    pthread_t thread;
    atomic_int stop;
    int running;
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
    while (!atomic_load(&w.stop)) {
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

/* Sleep ms, waking early when told to stop. */
static void nap(int ms)
{
    for (int slept = 0; slept < ms && !atomic_load(&w.stop); slept += WATCH_POLL_MS)
        util_sleep_ms(ms - slept < WATCH_POLL_MS ? ms - slept : WATCH_POLL_MS);
}

static void *watch_main(void *arg)
{
    (void)arg;
    const struct cfg *c = w.cfg;
    size_t next = 0;
    int attempt = 0, logged_down = 0;
    while (!atomic_load(&w.stop)) {
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
            redisContext *q = connect_one(c, addr, err, sizeof(err));
            int ok = q && redisSetTimeout(q, ms_tv(c->redis.command_timeout_ms)) == REDIS_OK &&
                     ask_one(c, q, addr, host, sizeof(host), &port, err, sizeof(err)) == 0;
            redisFree(q);
            if (ok) {
                char now[300];
                snprintf(now, sizeof(now), "%s:%d", host, port);
                note_primary(now);
                if (logged_down)
                    log_notice("sentinel watch: listening to %s again (primary %s at %s)", addr,
                               c->redis.master_name, w.primary);
                logged_down = 0;
                attempt = 0;
                listen_switches(rc);
                if (!atomic_load(&w.stop))
                    snprintf(err, sizeof(err), "sentinel %s: %s", addr, rc->err ? rc->errstr : "connection lost");
            }
        } else if (rc) {
            snprintf(err, sizeof(err), "sentinel %s: %s", addr, rc->errstr);
        }
        redisFree(rc);
        if (atomic_load(&w.stop))
            break;
        if (!logged_down)
            log_warn("sentinel watch: %s; trying the next Sentinel", err);
        logged_down = 1;
        nap((int)util_backoff_ms(attempt++, WATCH_RETRY_BASE_MS, WATCH_RETRY_CAP_MS));
    }
    return NULL;
}

int sentinel_watch_start(const struct cfg *c, void (*on_switch)(const char *from, const char *to), char *err,
                         size_t errlen)
{
    if (c->redis.sentinels.n == 0 || w.running)
        return 0;
    w.cfg = c;
    w.on_switch = on_switch;
    w.primary[0] = '\0';
    atomic_store(&w.stop, 0);
    int rv = pthread_create(&w.thread, NULL, watch_main, NULL);
    if (rv != 0) {
        snprintf(err, errlen, "sentinel watch: cannot start a thread: %s", strerror(rv));
        return -1;
    }
    w.running = 1;
    return 0;
}

void sentinel_watch_stop(void)
{
    if (!w.running)
        return;
    atomic_store(&w.stop, 1);
    pthread_join(w.thread, NULL);
    w.running = 0;
}
