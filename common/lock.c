#include "lock.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "keys.h"
#include "log.h"
#include "rconn.h"
#include "rfunc.h"
#include "util.h"

/* How long a group's hash (its locks and its last fence) outlives its last
 * write. After that the Redis clock alone keeps fences growing (see
 * seckill_lock_acquire), and the entries of holders that died unreleased are
 * gone with it. */
#define LOCK_GROUP_KEEP_MS (24LL * 3600 * 1000)
/* Acquisitions whose reply was lost are sent again, at most this often. */
#define LOCK_RESEND_MAX 3
/* The renewal policy, in fractions of the lease. The watchdog renews once a
 * third of it has run, leaving two thirds for a slow round trip or a Redis
 * restart; a renewal that got no answer is tried again after a tenth, so a
 * few more tries fit before the lease ends. */
#define LOCK_RENEW_DIV 3
#define LOCK_RETRY_DIV 10
/* A group's hash outlives at least this many leases (see LOCK_GROUP_KEEP_MS). */
#define LOCK_GROUP_KEEP_TTLS 10LL
/* Most locks in one script call: a script holds Redis for its whole run, so
 * a huge batch is cut into calls of this size (each well under a
 * millisecond), still pipelined in one round trip. */
#define LOCK_CALL_MAX 128
/* Most leases renewed in one round trip; more due at once take several. */
#define LOCK_RENEW_BATCH 512

/* States of an acquisition or release in flight that share an int with enum
 * lock_status but never leave this file. */
enum lock_step {
    LOCK_UNTRIED = -2, /* an acquisition not sent yet, or to send again (NOSCRIPT) */
    LOCK_SKIP = -3,    /* a release not to send again */
};

struct lock {
    struct lock *next, *prev; /* in lc->held, under lc->mu */
    struct lock *hnext;      /* in lc->by_name's bucket: owner thread only */
    uint64_t seq;            /* tells a new lock from a freed one at the same address */
    char name[KEYS_MAX];
    char key[KEYS_MAX]; /* its group's hash */
    unsigned group; /* keys_lock_group(name): the calls it shares */
    int64_t fence;
    int holds;               /* owner thread only */
    int ttl_ms;
    int64_t acquired_ms;     /* monotonic */
    _Atomic int64_t renew_at_ms;    /* monotonic: next renewal due */
    _Atomic int64_t valid_until_ms; /* monotonic: lease end as seen from here */
    _Atomic bool lost;
};

struct lock_client {
    const struct cfg *cfg;
    char token[33];
    redisContext *rc; /* owner thread */
    struct rfunc s_acquire, s_release;
    uint64_t next_req; /* owner thread: request ids are this counter, unique per token */
    /* Owner thread: an error reply that every call gets while it lasts (a
     * demoted primary's READONLY, a refused ACL) is logged once, counted,
     * and said again when a call succeeds: one line per attempt filled the
     * journal (1.1 MB of READONLY in three minutes). */
    struct log_repeat say_acquire, say_release;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    /* When the watchdog looks next (monotonic), under mu: 0 while it is
     * awake (it looks at every lease before sleeping again), INT64_MAX while
     * nothing is held. A new lease wakes it only if due before this: waking
     * it on every acquisition cost a futex storm and bought nothing. */
    int64_t wake_at_ms;
    struct lock *held;
    /* The held locks by name, for the owner thread (which alone adds and
     * removes them): a batch of 1,000 users searched the list once per
     * user, and the strcmp calls were a tenth of the consumer's CPU. */
    struct lock **by_name;
    size_t nbuckets, nheld;
    uint64_t next_seq;
    pthread_t watchdog;
    redisContext *wrc; /* watchdog thread */
    struct rfunc w_extend;
    struct log_repeat say_renew; /* the watchdog's: the function missing */
    /* The watchdog's copies of the due keys (the locks may be freed while it
     * talks to Redis); too big for its stack, allocated once. */
    char (*wkeys)[KEYS_MAX];

    _Atomic uint64_t acquired, contended, timeouts, wait_ms, hold_ms, renewals, lost, not_held, errors, calls;
};

bool lock_name_valid(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > 200)
        return false;
    for (const char *p = name; *p; p++)
        if (*p == '{' || *p == '}' || (unsigned char)*p < 0x21 || *p == 0x7f)
            return false;
    return true;
}

/* --- connection ---------------------------------------------------------- */

/* (Re)connect ctx if it is broken. 0 or -1; logs only state changes. */
static int ensure_conn(struct lock_client *lc, redisContext **ctx, const char *who)
{
    if (!rconn_broken(*ctx))
        return 0;
    char err[256];
    bool was_up = *ctx != NULL;
    if (*ctx)
        redisFree(*ctx);
    *ctx = NULL;
    if (rconn_open(lc->cfg, ctx, err, sizeof(err)) != 0) {
        if (was_up)
            log_warn("lock %s: lost Redis connection: %s", who, err);
        return -1;
    }
    return 0;
}

/* Redis lacks one of the lock's functions: said once while it lasts (the
 * programs never load code; an operator must, docs/operations.md). */
static void say_missing(struct log_repeat *say, const struct rfunc *f)
{
    char why[512];
    rfunc_missing_text(f, why, sizeof(why));
    log_repeat(say, LOG_LVL_ERROR, "lock: function missing", "lock: redis: %s (logged once while it lasts)",
               why);
}

static void count_error(struct lock_client *lc, redisContext *ctx, const char *what)
{
    lc->errors++;
    log_debug("lock: %s: %s", what, ctx ? ctx->errstr : "no connection");
}

/* --- watchdog ------------------------------------------------------------ */

static void cond_deadline(struct timespec *ts, int64_t at_mono_ms)
{
    ts->tv_sec = at_mono_ms / 1000;
    ts->tv_nsec = (at_mono_ms % 1000) * 1000000;
}

static void mark_lost(struct lock_client *lc, struct lock *l, const char *why)
{
    if (!atomic_exchange(&l->lost, true)) {
        lc->lost++;
        log_warn("lock %s: lease lost (%s)", l->name, why);
    }
}

/* Order the entries whose grp[i] is a group (not -1) into script calls:
 * one per group, cut at LOCK_CALL_MAX. idx[] gets the entries in call
 * order, cnt[] each call's size. Returns the number of calls. */
static size_t plan_calls(const int *grp, size_t n, size_t *idx, size_t *cnt)
{
    size_t k = 0, calls = 0;
    for (int g = 0; g < KEYS_LOCK_GROUPS; g++) {
        size_t in_call = 0;
        for (size_t i = 0; i < n; i++) {
            if (grp[i] != g)
                continue;
            if (in_call == 0)
                cnt[calls++] = 0;
            idx[k++] = i;
            cnt[calls - 1]++;
            if (++in_call == LOCK_CALL_MAX)
                in_call = 0;
        }
    }
    return calls;
}

/* ARGV "keep" of the acquire and extend scripts, for leases up to ttl_ms. */
static void group_keep(char *buf, size_t len, int ttl_ms)
{
    int64_t keep_ms = LOCK_GROUP_KEEP_TTLS * ttl_ms;
    snprintf(buf, len, "%lld", (long long)(LOCK_GROUP_KEEP_MS > keep_ms ? LOCK_GROUP_KEEP_MS : keep_ms));
}

/* The leases one renewal round trip extends. The watchdog copies what it
 * sends (names, groups, leases) while it holds mu, because it talks to
 * Redis without mu and the locks may be released and freed meanwhile; ptr
 * and seq find them again afterwards, if they are still held. */
struct renewal {
    char (*names)[KEYS_MAX]; /* lc->wkeys: too big for the watchdog's stack */
    char ttls[LOCK_RENEW_BATCH][12];
    struct lock *ptr[LOCK_RENEW_BATCH];
    uint64_t seq[LOCK_RENEW_BATCH];
    int grp[LOCK_RENEW_BATCH];
    long long result[LOCK_RENEW_BATCH]; /* the script's answer: 1 renewed, 0 not ours; -1 none */
    char hash[KEYS_LOCK_GROUPS][KEYS_MAX];
    size_t n;
    int ttl_max;
    int64_t sent; /* monotonic: when the round trip went out */
};

/* Copy every due lease (up to LOCK_RENEW_BATCH) into rn. Called with mu
 * held. Returns how many. */
static size_t collect_due(struct lock_client *lc, int64_t now, struct renewal *rn)
{
    rn->n = 0;
    rn->ttl_max = 0;
    for (struct lock *l = lc->held; l && rn->n < LOCK_RENEW_BATCH; l = l->next) {
        size_t n = rn->n;
        if (l->lost || l->renew_at_ms > now)
            continue;
        memcpy(rn->names[n], l->name, sizeof(l->name));
        memcpy(rn->hash[l->group], l->key, sizeof(l->key));
        snprintf(rn->ttls[n], sizeof(rn->ttls[n]), "%d", l->ttl_ms);
        if (l->ttl_ms > rn->ttl_max)
            rn->ttl_max = l->ttl_ms;
        rn->ptr[n] = l;
        rn->seq[n] = l->seq;
        rn->grp[n] = (int)l->group;
        rn->n++;
    }
    return rn->n;
}

/* Send the extend script for rn's leases, one call per group, all pipelined
 * in one round trip, and read each lease's answer into rn->result (-1 where
 * none came). Called without mu: this is the part that waits on Redis. */
static void extend_leases(struct lock_client *lc, struct renewal *rn)
{
    size_t idx[LOCK_RENEW_BATCH], cnt[LOCK_RENEW_BATCH];
    const char *argv[3 + 2 * LOCK_CALL_MAX];
    char keep[24];

    size_t calls = plan_calls(rn->grp, rn->n, idx, cnt);
    group_keep(keep, sizeof(keep), rn->ttl_max);
    rn->sent = util_mono_ms();
    for (size_t i = 0; i < rn->n; i++)
        rn->result[i] = -1;
    bool ok = ensure_conn(lc, &lc->wrc, "watchdog") == 0;
    for (size_t c = 0, k = 0; ok && c < calls; k += cnt[c], c++) {
        argv[0] = rn->hash[rn->grp[idx[k]]];
        argv[1] = lc->token;
        argv[2] = keep;
        for (size_t j = 0; j < cnt[c]; j++) {
            argv[3 + j] = rn->names[idx[k + j]];
            argv[3 + cnt[c] + j] = rn->ttls[idx[k + j]];
        }
        ok = rfunc_append(lc->wrc, &lc->w_extend, 1, 2 + 2 * (int)cnt[c], argv, NULL) == 0;
        lc->calls++;
    }
    for (size_t c = 0, k = 0; c < calls; k += cnt[c], c++) {
        redisReply *r = NULL;
        if (ok && redisGetReply(lc->wrc, (void **)&r) != REDIS_OK)
            ok = false;
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements == cnt[c]) {
            for (size_t j = 0; j < cnt[c]; j++)
                if (r->element[j]->type == REDIS_REPLY_INTEGER)
                    rn->result[idx[k + j]] = r->element[j]->integer;
            log_repeat_end(&lc->say_renew, "a renewal answered");
        } else if (rfunc_is_missing(r)) {
            say_missing(&lc->say_renew, &lc->w_extend); /* the leases run out: lost */
        }
        if (r)
            freeReplyObject(r);
    }
    if (!ok)
        count_error(lc, lc->wrc, "renew");
}

/* Give each lease still held its answer: extended, lost, or tried again
 * soon. Called with mu held again. */
static void apply_renewals(struct lock_client *lc, const struct renewal *rn)
{
    int64_t after = util_mono_ms();
    for (size_t i = 0; i < rn->n; i++) {
        struct lock *l;
        for (l = lc->held; l && !(l == rn->ptr[i] && l->seq == rn->seq[i]); l = l->next)
            ;
        if (l == NULL)
            continue; /* released meanwhile */
        if (rn->result[i] == 1) {
            /* The lease runs from when we asked, not from when Redis answered. */
            l->valid_until_ms = rn->sent + l->ttl_ms;
            l->renew_at_ms = rn->sent + l->ttl_ms / LOCK_RENEW_DIV;
            lc->renewals++;
        } else if (rn->result[i] == 0) {
            mark_lost(lc, l, "taken over or expired before renewal");
        } else if (after >= l->valid_until_ms) {
            mark_lost(lc, l, "Redis unreachable until the lease ran out");
        } else {
            /* Try again soon, well before the lease ends. */
            int64_t retry = after + l->ttl_ms / LOCK_RETRY_DIV;
            l->renew_at_ms = retry < l->valid_until_ms ? retry : l->valid_until_ms;
        }
    }
}

/* Renew every due lease (up to LOCK_RENEW_BATCH of them) in one pipelined
 * round trip, one script call per group. Called with mu held; drops it
 * while talking to Redis. */
static void renew_due(struct lock_client *lc, int64_t now)
{
    struct renewal rn;
    rn.names = lc->wkeys;
    if (collect_due(lc, now, &rn) == 0)
        return;
    pthread_mutex_unlock(&lc->mu);
    extend_leases(lc, &rn);
    pthread_mutex_lock(&lc->mu);
    apply_renewals(lc, &rn);
}

static void *watchdog_main(void *arg)
{
    struct lock_client *lc = arg;
    pthread_mutex_lock(&lc->mu);
    while (!lc->stop) {
        lc->wake_at_ms = 0; /* awake: a new lease is seen in the scan below */
        int64_t now = util_mono_ms();
        int64_t next = INT64_MAX;
        for (struct lock *l = lc->held; l; l = l->next) {
            if (l->lost)
                continue;
            if (now >= l->valid_until_ms)
                mark_lost(lc, l, "not renewed in time");
            else if (l->renew_at_ms < next)
                next = l->renew_at_ms;
        }
        if (next <= now) {
            renew_due(lc, now);
            continue;
        }
        lc->wake_at_ms = next;
        if (next == INT64_MAX) {
            pthread_cond_wait(&lc->cv, &lc->mu);
        } else {
            struct timespec ts;
            cond_deadline(&ts, next);
            pthread_cond_timedwait(&lc->cv, &lc->mu, &ts);
        }
    }
    pthread_mutex_unlock(&lc->mu);
    return NULL;
}

/* --- client -------------------------------------------------------------- */

int lock_client_open(const struct cfg *cfg, struct lock_client **out, char *err, size_t errlen)
{
    struct lock_client *lc = calloc(1, sizeof(*lc));
    if (lc == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    lc->cfg = cfg;
    lc->s_acquire = (struct rfunc)RFUNC_INIT("seckill_lock_acquire", RFUNC_LIB_LOCK);
    lc->s_release = (struct rfunc)RFUNC_INIT("seckill_lock_release", RFUNC_LIB_LOCK);
    lc->w_extend = (struct rfunc)RFUNC_INIT("seckill_lock_extend", RFUNC_LIB_LOCK);
    if ((lc->wkeys = calloc(LOCK_RENEW_BATCH, sizeof(*lc->wkeys))) == NULL) {
        snprintf(err, errlen, "out of memory");
        goto fail_free;
    }
    if (util_random_hex(lc->token, 16) != 0) {
        snprintf(err, errlen, "no randomness for the lock token: %s", strerror(errno));
        goto fail_free;
    }
    if (rconn_open(cfg, &lc->rc, err, errlen) != 0)
        goto fail_free;
    pthread_mutex_init(&lc->mu, NULL);
    util_cond_init_mono(&lc->cv);
    if (pthread_create(&lc->watchdog, NULL, watchdog_main, lc) != 0) {
        snprintf(err, errlen, "cannot start the lock watchdog");
        goto fail;
    }
    *out = lc;
    return 0;
fail:
    pthread_cond_destroy(&lc->cv);
    pthread_mutex_destroy(&lc->mu);
    redisFree(lc->rc);
fail_free:
    free(lc->wkeys);
    free(lc);
    return -1;
}

void lock_client_close(struct lock_client *lc)
{
    if (lc == NULL)
        return;
    pthread_mutex_lock(&lc->mu);
    lc->stop = true;
    pthread_cond_signal(&lc->cv);
    pthread_mutex_unlock(&lc->mu);
    pthread_join(lc->watchdog, NULL);
    while (lc->held) {
        struct lock *l = lc->held;
        lc->held = l->next;
        free(l);
    }
    free(lc->by_name);
    pthread_cond_destroy(&lc->cv);
    pthread_mutex_destroy(&lc->mu);
    if (lc->rc)
        redisFree(lc->rc);
    if (lc->wrc)
        redisFree(lc->wrc);
    free(lc->wkeys);
    free(lc);
}

void lock_client_counters(const struct lock_client *lc, struct lock_counters *o)
{
    o->acquired = lc->acquired;
    o->contended = lc->contended;
    o->timeouts = lc->timeouts;
    o->wait_ms = lc->wait_ms;
    o->hold_ms = lc->hold_ms;
    o->renewals = lc->renewals;
    o->lost = lc->lost;
    o->not_held = lc->not_held;
    o->errors = lc->errors;
    o->calls = lc->calls;
}

int64_t lock_fence(const struct lock *l) { return l->fence; }
int lock_holds(const struct lock *l) { return l->holds; }

bool lock_lost(const struct lock *l)
{
    return l->lost || util_mono_ms() >= l->valid_until_ms;
}

/* --- acquire ------------------------------------------------------------- */

struct attempt {
    const char *name;
    char key[KEYS_MAX]; /* its group's hash */
    int group;
    char req[24];
    int64_t sent_ms;
    int status;     /* enum lock_status, or LOCK_UNTRIED */
    int64_t fence;
    int holds;
    int64_t pttl;
};

static size_t name_hash(const char *name)
{
    uint64_t h = 14695981039346656037ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    return (size_t)h;
}

static struct lock *held_find(struct lock_client *lc, const char *name)
{
    if (!lc->nbuckets)
        return NULL;
    for (struct lock *l = lc->by_name[name_hash(name) & (lc->nbuckets - 1)]; l; l = l->hnext)
        if (strcmp(l->name, name) == 0)
            return l;
    return NULL;
}

/* Index l by its name, growing the table to keep chains short. 0 or -1. */
static int held_index(struct lock_client *lc, struct lock *l)
{
    if (lc->nheld + 1 > lc->nbuckets) {
        size_t n = lc->nbuckets ? lc->nbuckets * 2 : 64;
        struct lock **b = calloc(n, sizeof(*b));
        if (!b)
            return -1;
        for (size_t i = 0; i < lc->nbuckets; i++)
            for (struct lock *x = lc->by_name[i], *next; x; x = next) {
                next = x->hnext;
                x->hnext = b[name_hash(x->name) & (n - 1)];
                b[name_hash(x->name) & (n - 1)] = x;
            }
        free(lc->by_name);
        lc->by_name = b;
        lc->nbuckets = n;
    }
    struct lock **head = &lc->by_name[name_hash(l->name) & (lc->nbuckets - 1)];
    l->hnext = *head;
    *head = l;
    lc->nheld++;
    return 0;
}

static void held_unindex(struct lock_client *lc, struct lock *l)
{
    for (struct lock **pp = &lc->by_name[name_hash(l->name) & (lc->nbuckets - 1)]; *pp; pp = &(*pp)->hnext)
        if (*pp == l) {
            *pp = l->hnext;
            lc->nheld--;
            return;
        }
}

static int attempt_init(struct lock_client *lc, struct attempt *a, const char *name)
{
    memset(a, 0, sizeof(*a));
    a->name = name;
    a->status = LOCK_UNTRIED;
    if (!lock_name_valid(name) || keys_lock(a->key, sizeof(a->key), lc->cfg->redis.key_prefix, name) < 0) {
        log_error("lock: invalid lock name '%s'", name);
        a->status = LOCK_ERROR;
        return -1;
    }
    a->group = (int)keys_lock_group(name);
    /* One request id per acquisition, kept across resends of it. The script
     * compares it only once the owner token matched, so the token plus a
     * counter of the client's is as unique as a random id, without a
     * getrandom() per lock. */
    snprintf(a->req, sizeof(a->req), "%" PRIu64, ++lc->next_req);
    return 0;
}

/* e: the three integers the script returns for this attempt, or NULL when
 * the call's reply was not the array expected. false when the reply was not
 * one the script gives (the attempt is then LOCK_ERROR). */
static bool attempt_parse(struct attempt *a, redisReply *const *e)
{
    if (e && e[0]->type == REDIS_REPLY_INTEGER && e[1]->type == REDIS_REPLY_INTEGER &&
        e[2]->type == REDIS_REPLY_INTEGER) {
        if (e[0]->integer == 1) {
            a->status = LOCK_OK;
            a->fence = e[1]->integer;
            a->holds = (int)e[2]->integer;
            return true;
        }
        if (e[0]->integer == 0) {
            a->status = LOCK_BUSY;
            a->pttl = e[1]->integer;
            return true;
        }
    }
    a->status = LOCK_ERROR;
    return false;
}

/* An error reply's text, or what else a reply was. */
static const char *reply_text(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR ? r->str : "a reply of another shape";
}

/* Scratch space for planning the script calls of n locks. */
struct plan {
    int *grp;
    size_t *idx, *cnt;
};

static int plan_alloc(struct plan *p, size_t n)
{
    p->grp = calloc(n ? n : 1, sizeof(*p->grp));
    p->idx = calloc(n ? n : 1, sizeof(*p->idx));
    p->cnt = calloc(n ? n : 1, sizeof(*p->cnt));
    return p->grp && p->idx && p->cnt ? 0 : -1;
}

static void plan_free(struct plan *p)
{
    free(p->grp);
    free(p->idx);
    free(p->cnt);
}

/* Send the acquire script for every attempt not settled yet (untried or
 * busy), one call per group, all pipelined in one round trip; parse the
 * replies into the attempts. Returns 0, or -1 when the connection failed
 * (those attempts keep their status). */
static int acquire_round(struct lock_client *lc, struct attempt *at, size_t n, int ttl_ms, struct plan *p)
{
    char ttl[16], keep[24];
    snprintf(ttl, sizeof(ttl), "%d", ttl_ms);
    group_keep(keep, sizeof(keep), ttl_ms);
    if (ensure_conn(lc, &lc->rc, "client") != 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        p->grp[i] = at[i].status == LOCK_UNTRIED || at[i].status == LOCK_BUSY ? at[i].group : -1;
    size_t calls = plan_calls(p->grp, n, p->idx, p->cnt);
    const char *argv[4 + 2 * LOCK_CALL_MAX];
    int64_t now = util_mono_ms();
    for (size_t c = 0, k = 0; c < calls; k += p->cnt[c], c++) {
        size_t m = p->cnt[c];
        argv[0] = at[p->idx[k]].key;
        argv[1] = lc->token;
        argv[2] = ttl;
        argv[3] = keep;
        for (size_t j = 0; j < m; j++) {
            struct attempt *a = &at[p->idx[k + j]];
            argv[4 + j] = a->name;
            argv[4 + m + j] = a->req;
            a->sent_ms = now;
        }
        if (rfunc_append(lc->rc, &lc->s_acquire, 1, (int)(3 + 2 * m), argv, NULL) != 0)
            return -1;
        lc->calls++;
    }
    for (size_t c = 0, k = 0; c < calls; k += p->cnt[c], c++) {
        size_t m = p->cnt[c];
        redisReply *r = NULL;
        if (redisGetReply(lc->rc, (void **)&r) != REDIS_OK)
            return -1; /* the reply is lost; the attempts are resent with the same request ids */
        if (rfunc_is_missing(r)) {
            /* Nothing ran; the statuses stay (busy or untried) and the
             * caller's wait runs out: the consumer retries with backoff. */
            say_missing(&lc->say_acquire, &lc->s_acquire);
        } else {
            bool shaped = r->type == REDIS_REPLY_ARRAY && r->elements == 3 * m, ok = true;
            for (size_t j = 0; j < m; j++)
                ok = attempt_parse(&at[p->idx[k + j]], shaped ? &r->element[3 * j] : NULL) && ok;
            if (ok)
                log_repeat_end(&lc->say_acquire, "a lock answered");
            else
                log_repeat(&lc->say_acquire, LOG_LVL_ERROR, reply_text(r),
                           "lock %s: unexpected reply to acquire: %s (logged once while it lasts)",
                           at[p->idx[k]].name, reply_text(r));
        }
        freeReplyObject(r);
    }
    return 0;
}

static struct lock *lock_adopt(struct lock_client *lc, struct attempt *a, int ttl_ms)
{
    struct lock *l = held_find(lc, a->name);
    if (l == NULL) {
        if ((l = calloc(1, sizeof(*l))) == NULL)
            return NULL;
        snprintf(l->name, sizeof(l->name), "%s", a->name);
        memcpy(l->key, a->key, sizeof(l->key));
        l->acquired_ms = a->sent_ms;
        l->ttl_ms = ttl_ms;
        l->fence = a->fence;
        l->holds = a->holds;
        l->group = (unsigned)a->group;
        l->valid_until_ms = a->sent_ms + ttl_ms;
        l->renew_at_ms = a->sent_ms + ttl_ms / LOCK_RENEW_DIV;
        if (held_index(lc, l) != 0) {
            free(l);
            return NULL;
        }
        pthread_mutex_lock(&lc->mu);
        l->seq = ++lc->next_seq;
        l->next = lc->held;
        if (lc->held)
            lc->held->prev = l;
        lc->held = l;
        /* The watchdog sleeps until its earliest renewal; only a lease due
         * before that needs it awake (a shorter lease than those held, or
         * the first one). Otherwise it finds this one when it next looks. */
        if (l->renew_at_ms < lc->wake_at_ms)
            pthread_cond_signal(&lc->cv);
        pthread_mutex_unlock(&lc->mu);
    } else {
        pthread_mutex_lock(&lc->mu);
        l->holds = a->holds;
        l->valid_until_ms = a->sent_ms + l->ttl_ms;
        pthread_mutex_unlock(&lc->mu);
    }
    return l;
}

/* How many attempts are still to settle (untried after a NOSCRIPT, or
 * busy), and into *min_pttl the shortest remaining lease of their holders:
 * 0 when one is to be resent at once, INT64_MAX when none is known. */
static size_t unsettled(const struct attempt *at, size_t n, int64_t *min_pttl)
{
    size_t busy = 0;
    *min_pttl = INT64_MAX;
    for (size_t i = 0; i < n; i++) {
        if (at[i].status == LOCK_UNTRIED) {
            busy++; /* NOSCRIPT: resend at once */
            *min_pttl = 0;
        } else if (at[i].status == LOCK_BUSY) {
            busy++;
            if (at[i].pttl >= 0 && at[i].pttl < *min_pttl)
                *min_pttl = at[i].pttl;
        }
    }
    return busy;
}

/* The pause before round attempt + 1: a jittered backoff, never past the
 * left_ms before the deadline, and not much longer than the holder's
 * remaining lease (min_pttl, as unsettled gives it). */
static int64_t backoff(const struct lock_client *lc, int attempt, int64_t min_pttl, int64_t left_ms)
{
    /* Reloadable: read atomically, the reloading thread may be writing. */
    int64_t d = min_pttl == 0 ? 0 : util_backoff_ms(attempt, CFG_GET(lc->cfg->lock.backoff_base_ms),
                                                    CFG_GET(lc->cfg->lock.backoff_cap_ms));
    if (min_pttl != INT64_MAX && min_pttl > 0 && d > min_pttl + 1)
        d = min_pttl + 1;
    return d > left_ms ? left_ms : d;
}

/* Hand each attempt's end to the caller: a held lock for the acquired ones
 * (adopted into the client), LOCK_BUSY or LOCK_ERROR for the others, counted.
 * Returns how many were acquired. */
static size_t settle(struct lock_client *lc, struct attempt *at, size_t n, int ttl_ms, struct lock **out,
                     int *status)
{
    size_t got = 0;
    for (size_t i = 0; i < n; i++) {
        if (at[i].status == LOCK_OK) {
            out[i] = lock_adopt(lc, &at[i], ttl_ms);
            if (out[i] == NULL) {
                status[i] = LOCK_ERROR;
                continue;
            }
            status[i] = LOCK_OK;
            lc->acquired++;
            got++;
        } else if (at[i].status == LOCK_BUSY) {
            status[i] = LOCK_BUSY;
            lc->timeouts++;
        } else {
            status[i] = LOCK_ERROR;
        }
    }
    return got;
}

static size_t acquire_many(struct lock_client *lc, const char *const *names, size_t n, int ttl_ms, int wait_ms,
                           struct lock **out, int *status)
{
    struct attempt *at = calloc(n ? n : 1, sizeof(*at));
    struct plan p;
    int64_t start = util_mono_ms(), deadline = start + (wait_ms > 0 ? wait_ms : 0), min_pttl;
    size_t got;
    bool waited = false;

    for (size_t i = 0; i < n; i++) {
        out[i] = NULL;
        status[i] = LOCK_ERROR;
    }
    if (plan_alloc(&p, n) != 0 || at == NULL) {
        plan_free(&p);
        free(at);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        attempt_init(lc, &at[i], names[i]);

    for (int attempt = 0, resends = 0;; attempt++) {
        if (acquire_round(lc, at, n, ttl_ms, &p) != 0) {
            count_error(lc, lc->rc, "acquire");
            if (++resends > LOCK_RESEND_MAX || util_mono_ms() >= deadline)
                break;
            continue; /* reconnect and resend: the request ids make it safe */
        }
        if (unsettled(at, n, &min_pttl) == 0)
            break;
        int64_t now = util_mono_ms();
        if (now >= deadline)
            break;
        waited = true;
        util_sleep_ms(backoff(lc, attempt, min_pttl, deadline - now));
    }

    int64_t waited_ms = util_mono_ms() - start;
    got = settle(lc, at, n, ttl_ms, out, status);
    if (waited) {
        lc->contended++;
        lc->wait_ms += (uint64_t)waited_ms;
    }
    plan_free(&p);
    free(at);
    return got;
}

size_t lock_acquire_many(struct lock_client *lc, const char *const *names, size_t n, int wait_ms,
                         struct lock **out, int *status)
{
    return acquire_many(lc, names, n, lc->cfg->lock.ttl_ms, wait_ms, out, status);
}

int lock_acquire(struct lock_client *lc, const char *name, int ttl_ms, int wait_ms, struct lock **out)
{
    struct lock *l = NULL;
    int st = LOCK_ERROR;
    acquire_many(lc, &name, 1, ttl_ms > 0 ? ttl_ms : lc->cfg->lock.ttl_ms, wait_ms, &l, &st);
    *out = l;
    return st;
}

/* --- release ------------------------------------------------------------- */

static void lock_forget(struct lock_client *lc, struct lock *l)
{
    held_unindex(lc, l);
    pthread_mutex_lock(&lc->mu);
    if (l->prev)
        l->prev->next = l->next;
    else
        lc->held = l->next;
    if (l->next)
        l->next->prev = l->prev;
    pthread_mutex_unlock(&lc->mu);
    lc->hold_ms += (uint64_t)(util_mono_ms() - l->acquired_ms);
    free(l);
}

/* One pipelined round of the release script, one call per group, for every
 * lock whose status is still LOCK_ERROR. Returns 0, or -1 when the
 * connection failed. */
static int release_round(struct lock_client *lc, struct lock **locks, size_t n, int *status, struct plan *p)
{
    if (ensure_conn(lc, &lc->rc, "client") != 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        p->grp[i] = status[i] == LOCK_ERROR ? (int)locks[i]->group : -1;
    size_t calls = plan_calls(p->grp, n, p->idx, p->cnt);
    const char *argv[2 + LOCK_CALL_MAX];
    for (size_t c = 0, k = 0; c < calls; k += p->cnt[c], c++) {
        size_t m = p->cnt[c];
        argv[0] = locks[p->idx[k]]->key;
        argv[1] = lc->token;
        for (size_t j = 0; j < m; j++)
            argv[2 + j] = locks[p->idx[k + j]]->name;
        if (rfunc_append(lc->rc, &lc->s_release, 1, 1 + (int)m, argv, NULL) != 0)
            return -1;
        lc->calls++;
    }
    for (size_t c = 0, k = 0; c < calls; k += p->cnt[c], c++) {
        size_t m = p->cnt[c];
        redisReply *r = NULL;
        if (redisGetReply(lc->rc, (void **)&r) != REDIS_OK)
            return -1;
        if (r->type == REDIS_REPLY_ARRAY && r->elements == m) {
            for (size_t j = 0; j < m; j++) {
                const redisReply *e = r->element[j];
                size_t i = p->idx[k + j];
                if (e->type != REDIS_REPLY_INTEGER)
                    continue;
                status[i] = e->integer >= 0 ? LOCK_OK : LOCK_NOT_HELD;
                locks[i]->holds = e->integer > 0 ? (int)e->integer : 0;
            }
            log_repeat_end(&lc->say_release, "a release answered");
        } else if (rfunc_is_missing(r)) {
            say_missing(&lc->say_release, &lc->s_release); /* nothing released: the leases run out */
        } else {
            log_repeat(&lc->say_release, LOG_LVL_ERROR, reply_text(r),
                       "lock: unexpected reply to release: %s (logged once while it lasts)", reply_text(r));
        }
        freeReplyObject(r);
    }
    return 0;
}

void lock_release_many(struct lock_client *lc, struct lock **locks, size_t n, int *status)
{
    bool *final_hold = calloc(n ? n : 1, sizeof(*final_hold));
    struct plan p;
    if (plan_alloc(&p, n) != 0 || final_hold == NULL) {
        for (size_t i = 0; i < n; i++)
            status[i] = LOCK_ERROR; /* handles kept; their leases run out */
        plan_free(&p);
        free(final_hold);
        return;
    }
    /* Stop renewing what is about to be freed before telling Redis: the
     * extend script never recreates a key, so a renewal already in flight
     * cannot resurrect it either. */
    pthread_mutex_lock(&lc->mu);
    for (size_t i = 0; i < n; i++) {
        status[i] = LOCK_ERROR;
        final_hold[i] = locks[i]->holds <= 1;
        if (final_hold[i])
            locks[i]->renew_at_ms = INT64_MAX;
    }
    pthread_mutex_unlock(&lc->mu);

    if (release_round(lc, locks, n, status, &p) != 0) {
        count_error(lc, lc->rc, "release");
        /* The connection was stale (Redis restarted) or broke mid-way. A
         * final release may be sent again: run twice it still deletes only
         * our own key, and "not held" then means released either way. A
         * re-entered hold is not resent: twice would drop two holds. */
        for (size_t i = 0; i < n; i++)
            if (status[i] == LOCK_ERROR && !final_hold[i])
                status[i] = LOCK_SKIP;
        if (release_round(lc, locks, n, status, &p) != 0)
            count_error(lc, lc->rc, "release");
        for (size_t i = 0; i < n; i++)
            if (status[i] == LOCK_SKIP)
                status[i] = LOCK_ERROR;
    }

    for (size_t i = 0; i < n; i++) {
        struct lock *l = locks[i];
        if (status[i] == LOCK_NOT_HELD) {
            lc->not_held++;
            log_notice("lock %s: release of a lock no longer held (fence %" PRId64 "): nothing deleted",
                       l->name, l->fence);
        }
        if (status[i] == LOCK_OK && l->holds > 0)
            continue; /* a hold given back: the lease runs on as it was */
        if (status[i] == LOCK_ERROR && !final_hold[i]) {
            l->holds--; /* unknown outcome: keep the handle, the lease tells */
            continue;
        }
        lock_forget(lc, l);
    }
    plan_free(&p);
    free(final_hold);
}

int lock_release(struct lock_client *lc, struct lock *l)
{
    int st;
    lock_release_many(lc, &l, 1, &st);
    return st;
}

/* --- inspection ---------------------------------------------------------- */

int lock_inspect(const struct cfg *cfg, const char *name, struct lock_info *out, char *err, size_t errlen)
{
    char key[KEYS_MAX];
    redisContext *rc = NULL;
    redisReply *r[2] = { NULL, NULL };
    int ret = -1;

    memset(out, 0, sizeof(*out));
    if (!lock_name_valid(name) || keys_lock(key, sizeof(key), cfg->redis.key_prefix, name) < 0) {
        snprintf(err, errlen, "invalid lock name '%s'", name);
        return -1;
    }
    snprintf(out->key, sizeof(out->key), "%s", key);
    out->ttl_ms = -2;
    if (rconn_open(cfg, &rc, err, errlen) != 0)
        return -1;
    redisAppendCommand(rc, "HMGET %s %s {fence}", key, name);
    redisAppendCommand(rc, "TIME");
    for (int i = 0; i < 2; i++) {
        if (redisGetReply(rc, (void **)&r[i]) != REDIS_OK) {
            snprintf(err, errlen, "redis: %s", rc->errstr);
            goto fail;
        }
    }
    int64_t now_ms;
    if (r[0]->type != REDIS_REPLY_ARRAY || r[0]->elements != 2 || rconn_time_ms(r[1], &now_ms) != 0) {
        snprintf(err, errlen, "redis: unexpected reply to HMGET or TIME");
        goto fail;
    }
    const redisReply *v = r[0]->element[0];
    /* "OWNER REQ HOLDS FENCE EXPIRES" (see seckill_lock_acquire); an entry
     * whose lease has run out is a free lock, not yet overwritten. */
    long long holds = 0, fence = 0, expires = 0;
    if (v->type == REDIS_REPLY_STRING &&
        sscanf(v->str, "%63s %*s %lld %lld %lld", out->owner, &holds, &fence, &expires) == 4 && expires > now_ms) {
        out->held = true;
        out->holds = holds;
        out->fence = fence;
        out->ttl_ms = expires - now_ms;
    } else {
        out->owner[0] = '\0';
    }
    if (r[0]->element[1]->type == REDIS_REPLY_STRING)
        util_parse_i64(r[0]->element[1]->str, 0, INT64_MAX, &out->last_fence);
    ret = 0;
fail:
    for (int i = 0; i < 2; i++)
        if (r[i])
            freeReplyObject(r[i]);
    redisFree(rc);
    return ret;
}
