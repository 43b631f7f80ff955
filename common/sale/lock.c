#include "lock.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bgthread.h"
#include "funclibs.h"
#include "keys.h"
#include "log.h"
#include "rconn.h"
#include "rfunc.h"
#include "rpipe.h"
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
    struct lock *next, *prev; /* in lc->held, under lc->wd.mu */
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
    struct rp *rp;          /* owner thread: its Redis (one node or a Cluster) */
    struct rp_batch batch; /* owner thread: the round under way */
    struct rfunc s_acquire, s_release;
    uint64_t next_req; /* owner thread: request ids are this counter, unique per token */
    /* Owner thread: an error reply that every call gets while it lasts (a
     * demoted primary's READONLY, a refused ACL) is logged once, counted,
     * and said again when a call succeeds: one line per attempt filled the
     * journal (1.1 MB of READONLY in three minutes). */
    struct log_repeat say_acquire, say_release, say_conn;

    /* The watchdog thread; its mutex (wd.mu, "mu" here) guards what says so. */
    struct bgthread wd;
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
    struct rp *wrp; /* watchdog thread: a Redis of its own */
    struct rp_batch wbatch;
    struct rfunc w_extend;
    struct log_repeat say_renew, say_wconn; /* the watchdog's */
    /* The watchdog's copies of the due keys (the locks may be freed while it
     * talks to Redis) and the plan of its calls; too big for its stack,
     * allocated once. */
    char (*wkeys)[KEYS_MAX];
    struct plan *wplan;

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

/* --- script calls ------------------------------------------------------- */

/* The script calls of one round (an acquisition, a release, a renewal):
 * entry i, unless grp[i] is -1, goes in a call of its group whose KEYS[1]
 * is key[i]; each call's ARGV are the round's head, then its entries' first
 * column, then their second (if the round has two). plan_add fills the
 * batch: call c is the batch's command c, its entries idx[k..k+cnt[c]). */
struct plan {
    int *grp;
    const char **key, **col[2];
    size_t *idx, *cnt;
    size_t calls;
};

static void plan_free(struct plan *p)
{
    if (p == NULL)
        return;
    free(p->grp);
    free(p->key);
    free(p->col[0]);
    free(p->col[1]);
    free(p->idx);
    free(p->cnt);
}

static int plan_alloc(struct plan *p, size_t n)
{
    n = n ? n : 1;
    memset(p, 0, sizeof(*p));
    p->grp = calloc(n, sizeof(*p->grp));
    p->key = calloc(n, sizeof(*p->key));
    p->col[0] = calloc(n, sizeof(*p->col[0]));
    p->col[1] = calloc(n, sizeof(*p->col[1]));
    p->idx = calloc(n, sizeof(*p->idx));
    p->cnt = calloc(n, sizeof(*p->cnt));
    if (p->grp && p->key && p->col[0] && p->col[1] && p->idx && p->cnt)
        return 0;
    plan_free(p);
    return -1;
}

/* Order the entries into calls: one per group, cut at LOCK_CALL_MAX. */
static void plan_calls(struct plan *p, size_t n)
{
    size_t k = 0;
    p->calls = 0;
    for (int g = 0; g < KEYS_LOCK_GROUPS; g++) {
        size_t in_call = 0;
        for (size_t i = 0; i < n; i++) {
            if (p->grp[i] != g)
                continue;
            if (in_call == 0)
                p->cnt[p->calls++] = 0;
            p->idx[k++] = i;
            p->cnt[p->calls - 1]++;
            if (++in_call == LOCK_CALL_MAX)
                in_call = 0;
        }
    }
}

/* Plan the round's calls of f over entries 0..n and add them to the empty
 * batch b, routed by their group's hash: on a Cluster the groups live on
 * several primaries, and rpipe sends each call to its own. 0, or -1 out of
 * memory. */
static int plan_add(struct lock_client *lc, struct rp_batch *b, const struct rfunc *f, struct plan *p,
                    size_t n, const char *const *head, int nhead, int ncol)
{
    const char *argv[1 + 3 + 2 * LOCK_CALL_MAX];
    plan_calls(p, n);
    for (size_t c = 0, k = 0; c < p->calls; k += p->cnt[c], c++) {
        int a = 0;
        argv[a++] = p->key[p->idx[k]];
        for (int h = 0; h < nhead; h++)
            argv[a++] = head[h];
        for (int col = 0; col < ncol; col++)
            for (size_t j = 0; j < p->cnt[c]; j++)
                argv[a++] = p->col[col][p->idx[k + j]];
        if (rp_fcall(b, f->name, 1, a - 1, argv, NULL) < 0)
            return -1;
        lc->calls++;
    }
    return 0;
}

/* One round: the calls of f planned into the emptied batch b, then run on
 * rp. rp_run's answer (0, or -1 with err), or -1 out of memory. */
static int plan_run(struct lock_client *lc, struct rp *rp, struct rp_batch *b, const struct rfunc *f,
                    struct plan *p, size_t n, const char *const *head, int nhead, int ncol, char *err,
                    size_t errlen)
{
    rp_batch_reset(b);
    if (plan_add(lc, b, f, p, n, head, nhead, ncol) != 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return rp_run(rp, b, err, errlen);
}

/* ARGV "keep" of the acquire and extend scripts, for leases up to ttl_ms. */
static void group_keep(char *buf, size_t len, int ttl_ms)
{
    int64_t keep_ms = LOCK_GROUP_KEEP_TTLS * ttl_ms;
    snprintf(buf, len, "%lld", (long long)(LOCK_GROUP_KEEP_MS > keep_ms ? LOCK_GROUP_KEEP_MS : keep_ms));
}

/* An error reply's text, or what else a reply was. */
static const char *reply_text(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR ? r->str : "a reply of another shape";
}

/* What call c of a round came back as. */
enum call_end {
    CALL_ANSWERED, /* the script's array of `want` integers */
    CALL_NOT_RUN,  /* no reply (lost or not sent), the function missing, Redis still
                    * reading its data back: nothing ran */
    CALL_REFUSED,  /* another reply (an error: READONLY, an ACL refusal) */
};

/* Call c's end. A function missing (the programs never load code: an
 * operator must, docs/operations.md) or another reply is said once while it
 * lasts; a call without a reply is the round's failure, said by
 * round_end. */
static enum call_end call_end(const struct rp_batch *b, size_t c, size_t want, const struct rfunc *f,
                              struct log_repeat *say, const char *what)
{
    const redisReply *r = rp_reply(b, (int)c);
    if (rp_status(b, (int)c) != RP_OK || r == NULL)
        return CALL_NOT_RUN;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == want) {
        for (size_t i = 0; i < want; i++)
            if (r->element[i]->type != REDIS_REPLY_INTEGER)
                goto refused;
        return CALL_ANSWERED;
    }
    if (rp_classify(r) == RP_REPLY_LOADING) {
        /* A Redis just restarted: not an unexpected reply, and nothing ran;
         * the next round tries again. */
        log_repeat(say, LOG_LVL_WARNING, "lock: redis loading",
                   "lock: redis is reading its data back after a restart: %s not run yet, tried again "
                   "(logged once while it lasts)", what);
        return CALL_NOT_RUN;
    }
    if (rp_classify(r) == RP_REPLY_NO_FUNCTION) {
        char why[512];
        rfunc_missing_text(f, why, sizeof(why));
        log_repeat(say, LOG_LVL_ERROR, "lock: function missing",
                   "lock: redis: %s (logged once while it lasts)", why);
        return CALL_NOT_RUN;
    }
refused:
    log_repeat(say, LOG_LVL_ERROR, reply_text(r),
               "lock: unexpected reply to %s: %s (logged once while it lasts)", what, reply_text(r));
    return CALL_REFUSED;
}

/* After a round: a failed one (err, from rp_run) is counted and its reason
 * said once while it lasts on say_conn; a round whose calls all answered
 * ends whatever say was repeating, saying how (ended). */
static void round_end(struct lock_client *lc, int ran, const char *err, bool answered, struct log_repeat *say,
                      const char *ended, struct log_repeat *say_conn, const char *who)
{
    if (ran != 0) {
        lc->errors++;
        log_repeat(say_conn, LOG_LVL_WARNING, "lock: redis unreachable",
                   "lock %s: %s (logged once while it lasts)", who, err[0] ? err : "redis: no reply");
    } else {
        log_repeat_end(say_conn, "redis answered");
    }
    if (answered)
        log_repeat_end(say, ended);
}

/* --- watchdog ------------------------------------------------------------ */

static void mark_lost(struct lock_client *lc, struct lock *l, const char *why)
{
    if (!atomic_exchange(&l->lost, true)) {
        lc->lost++;
        log_warn("lock %s: lease lost (%s)", l->name, why);
    }
}

/* The leases one renewal round trip extends. The watchdog copies what it
 * sends (names, groups, leases) while it holds mu, because it talks to
 * Redis without mu and the locks may be released and freed meanwhile; ptr
 * and seq find them again afterwards, if they are still held. */
struct renewal {
    char (*names)[KEYS_MAX]; /* lc->wkeys: too big for the watchdog's stack */
    struct plan *p;          /* lc->wplan: its calls */
    char ttls[LOCK_RENEW_BATCH][12];
    struct lock *ptr[LOCK_RENEW_BATCH];
    uint64_t seq[LOCK_RENEW_BATCH];
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
        rn->p->grp[n] = (int)l->group;
        rn->p->key[n] = rn->hash[l->group];
        rn->p->col[0][n] = rn->names[n];
        rn->p->col[1][n] = rn->ttls[n];
        rn->n++;
    }
    return rn->n;
}

/* Send the extend script for rn's leases, one call per group, pipelined in
 * one round trip (per primary on a Cluster), and read each lease's answer
 * into rn->result (-1 where none came: tried again soon, or lost when the
 * lease ran out meanwhile). A reply lost is no harm: the script only
 * extends our own leases, so it may run again. Called without mu: this is
 * the part that waits on Redis. */
static void extend_leases(struct lock_client *lc, struct renewal *rn)
{
    struct rp_batch *b = &lc->wbatch;
    struct plan *p = rn->p;
    char keep[24], err[256] = "";
    group_keep(keep, sizeof(keep), rn->ttl_max);
    const char *head[] = { lc->token, keep };

    rn->sent = util_mono_ms();
    for (size_t i = 0; i < rn->n; i++)
        rn->result[i] = -1;
    int ran = plan_run(lc, lc->wrp, b, &lc->w_extend, p, rn->n, head, 2, 2, err, sizeof(err));
    bool answered = true;
    for (size_t c = 0, k = 0; c < p->calls; k += p->cnt[c], c++) {
        if (call_end(b, c, p->cnt[c], &lc->w_extend, &lc->say_renew, "renew") != CALL_ANSWERED) {
            answered = false;
            continue;
        }
        const redisReply *r = rp_reply(b, (int)c);
        for (size_t j = 0; j < p->cnt[c]; j++)
            rn->result[p->idx[k + j]] = r->element[j]->integer;
    }
    round_end(lc, ran, err, answered, &lc->say_renew, "a renewal answered", &lc->say_wconn, "watchdog");
    rp_batch_reset(b);
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
    rn.p = lc->wplan;
    if (collect_due(lc, now, &rn) == 0)
        return;
    pthread_mutex_unlock(&lc->wd.mu);
    extend_leases(lc, &rn);
    pthread_mutex_lock(&lc->wd.mu);
    apply_renewals(lc, &rn);
}

static void *watchdog_main(void *arg)
{
    struct lock_client *lc = arg;
    pthread_mutex_lock(&lc->wd.mu);
    while (!bgt_stopping(&lc->wd)) {
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
        bgt_wait_until(&lc->wd, next); /* INT64_MAX: until a lease or the stop wakes it */
    }
    pthread_mutex_unlock(&lc->wd.mu);
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
    lc->s_acquire = (struct rfunc)RFUNC_INIT("seckill_lock_acquire", &funclib_lock);
    lc->s_release = (struct rfunc)RFUNC_INIT("seckill_lock_release", &funclib_lock);
    lc->w_extend = (struct rfunc)RFUNC_INIT("seckill_lock_extend", &funclib_lock);
    lc->wkeys = calloc(LOCK_RENEW_BATCH, sizeof(*lc->wkeys));
    lc->wplan = malloc(sizeof(*lc->wplan));
    if (lc->wkeys == NULL || lc->wplan == NULL || plan_alloc(lc->wplan, LOCK_RENEW_BATCH) != 0) {
        free(lc->wplan);
        lc->wplan = NULL;
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (util_random_hex(lc->token, 16) != 0) {
        snprintf(err, errlen, "no randomness for the lock token: %s", strerror(errno));
        goto fail;
    }
    /* Both at once: a Redis that cannot be reached now is the caller's to
     * wait for (the consumer's start retries). */
    if (rp_open(cfg, cfg_role_self(), &lc->rp, err, errlen) != 0 ||
        rp_open(cfg, cfg_role_self(), &lc->wrp, err, errlen) != 0)
        goto fail;
    if (bgt_start(&lc->wd, watchdog_main, lc) != 0) {
        snprintf(err, errlen, "cannot start the lock watchdog");
        goto fail;
    }
    *out = lc;
    return 0;
fail:
    rp_close(lc->rp);
    rp_close(lc->wrp);
    plan_free(lc->wplan);
    free(lc->wplan);
    free(lc->wkeys);
    free(lc);
    return -1;
}

void lock_client_close(struct lock_client *lc)
{
    if (lc == NULL)
        return;
    bgt_stop(&lc->wd);
    while (lc->held) {
        struct lock *l = lc->held;
        lc->held = l->next;
        free(l);
    }
    free(lc->by_name);
    rp_batch_free(&lc->batch);
    rp_batch_free(&lc->wbatch);
    rp_close(lc->rp);
    rp_close(lc->wrp);
    plan_free(lc->wplan);
    free(lc->wplan);
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
    util_i64_text(a->req, (int64_t)++lc->next_req); /* (not snprintf: once per lock of a batch) */
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

/* Send the acquire script for every attempt not settled yet (untried or
 * busy), one call per group, pipelined in one round trip (per primary on a
 * Cluster); parse the answers into the attempts. An attempt whose call got
 * no answer keeps its status: a lost reply is resent with the same request
 * id (not counted twice), a missing function leaves it to the caller's
 * wait. Returns 0, or -1 when a call got no reply. */
static int acquire_round(struct lock_client *lc, struct attempt *at, size_t n, int ttl_ms, struct plan *p)
{
    struct rp_batch *b = &lc->batch;
    char ttl[16], keep[24], err[256] = "";
    snprintf(ttl, sizeof(ttl), "%d", ttl_ms);
    group_keep(keep, sizeof(keep), ttl_ms);
    const char *head[] = { lc->token, ttl, keep };
    int64_t now = util_mono_ms();
    for (size_t i = 0; i < n; i++) {
        bool open = at[i].status == LOCK_UNTRIED || at[i].status == LOCK_BUSY;
        p->grp[i] = open ? at[i].group : -1;
        p->key[i] = at[i].key, p->col[0][i] = at[i].name, p->col[1][i] = at[i].req;
        if (open)
            at[i].sent_ms = now; /* the lease runs from before the call */
    }
    int ran = plan_run(lc, lc->rp, b, &lc->s_acquire, p, n, head, 3, 2, err, sizeof(err));
    bool answered = true;
    for (size_t c = 0, k = 0; c < p->calls; k += p->cnt[c], c++) {
        enum call_end e = call_end(b, c, 3 * p->cnt[c], &lc->s_acquire, &lc->say_acquire, "acquire");
        const redisReply *r = rp_reply(b, (int)c);
        answered = answered && e == CALL_ANSWERED;
        for (size_t j = 0; e != CALL_NOT_RUN && j < p->cnt[c]; j++) {
            struct attempt *a = &at[p->idx[k + j]];
            if (attempt_parse(a, e == CALL_ANSWERED ? &r->element[3 * j] : NULL) || e != CALL_ANSWERED)
                continue;
            answered = false;
            log_repeat(&lc->say_acquire, LOG_LVL_ERROR, "lock: unexpected answer",
                       "lock %s: unexpected answer to acquire (logged once while it lasts)", a->name);
        }
    }
    round_end(lc, ran, err, answered, &lc->say_acquire, "a lock answered", &lc->say_conn, "client");
    rp_batch_reset(b);
    return ran;
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
        pthread_mutex_lock(&lc->wd.mu);
        l->seq = ++lc->next_seq;
        l->next = lc->held;
        if (lc->held)
            lc->held->prev = l;
        lc->held = l;
        /* The watchdog sleeps until its earliest renewal; only a lease due
         * before that needs it awake (a shorter lease than those held, or
         * the first one). Otherwise it finds this one when it next looks. */
        if (l->renew_at_ms < lc->wake_at_ms)
            bgt_wake(&lc->wd);
        pthread_mutex_unlock(&lc->wd.mu);
    } else {
        pthread_mutex_lock(&lc->wd.mu);
        l->holds = a->holds;
        l->valid_until_ms = a->sent_ms + l->ttl_ms;
        pthread_mutex_unlock(&lc->wd.mu);
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

static size_t acquire_many(struct lock_client *lc, const char *const *names, size_t n, int ttl_ms,
                           int wait_ms, struct lock **out, int *status)
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
    pthread_mutex_lock(&lc->wd.mu);
    if (l->prev)
        l->prev->next = l->next;
    else
        lc->held = l->next;
    if (l->next)
        l->next->prev = l->prev;
    pthread_mutex_unlock(&lc->wd.mu);
    lc->hold_ms += (uint64_t)(util_mono_ms() - l->acquired_ms);
    free(l);
}

/* One round of the release script, one call per group, pipelined in one
 * round trip (per primary on a Cluster), for every lock whose status is
 * still LOCK_ERROR; the answers set status and holds. Returns 0, or -1 when
 * a call got no reply (its locks keep LOCK_ERROR). */
static int release_round(struct lock_client *lc, struct lock **locks, size_t n, int *status, struct plan *p)
{
    struct rp_batch *b = &lc->batch;
    char err[256] = "";
    for (size_t i = 0; i < n; i++) {
        p->grp[i] = status[i] == LOCK_ERROR ? (int)locks[i]->group : -1;
        p->key[i] = locks[i]->key, p->col[0][i] = locks[i]->name;
    }
    const char *head[] = { lc->token };
    int ran = plan_run(lc, lc->rp, b, &lc->s_release, p, n, head, 1, 1, err, sizeof(err));
    bool answered = true;
    for (size_t c = 0, k = 0; c < p->calls; k += p->cnt[c], c++) {
        if (call_end(b, c, p->cnt[c], &lc->s_release, &lc->say_release, "release") != CALL_ANSWERED) {
            answered = false; /* nothing released: the leases run out */
            continue;
        }
        const redisReply *r = rp_reply(b, (int)c);
        for (size_t j = 0; j < p->cnt[c]; j++) {
            long long h = r->element[j]->integer;
            size_t i = p->idx[k + j];
            status[i] = h >= 0 ? LOCK_OK : LOCK_NOT_HELD;
            locks[i]->holds = h > 0 ? (int)h : 0;
        }
    }
    round_end(lc, ran, err, answered, &lc->say_release, "a release answered", &lc->say_conn, "client");
    rp_batch_reset(b);
    return ran;
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
    pthread_mutex_lock(&lc->wd.mu);
    for (size_t i = 0; i < n; i++) {
        status[i] = LOCK_ERROR;
        final_hold[i] = locks[i]->holds <= 1;
        if (final_hold[i])
            locks[i]->renew_at_ms = INT64_MAX;
    }
    pthread_mutex_unlock(&lc->wd.mu);

    if (release_round(lc, locks, n, status, &p) != 0) {
        /* The connection was stale (Redis restarted) or broke mid-way. A
         * final release may be sent again: run twice it still deletes only
         * our own key, and "not held" then means released either way. A
         * re-entered hold is not resent: twice would drop two holds. */
        for (size_t i = 0; i < n; i++)
            if (status[i] == LOCK_ERROR && !final_hold[i])
                status[i] = LOCK_SKIP;
        (void)release_round(lc, locks, n, status, &p);
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
    struct rp *rp = NULL;
    struct rp_batch b;
    int ret = -1;

    memset(out, 0, sizeof(*out));
    if (!lock_name_valid(name) || keys_lock(key, sizeof(key), cfg->redis.key_prefix, name) < 0) {
        snprintf(err, errlen, "invalid lock name '%s'", name);
        return -1;
    }
    snprintf(out->key, sizeof(out->key), "%s", key);
    out->ttl_ms = -2;
    rp_batch_init(&b);
    if (rp_open(cfg, cfg_role_self(), &rp, err, errlen) != 0)
        return -1;
    /* TIME routed by the group's key: the lease's end is in the clock of
     * the primary that holds the group. */
    if (rp_addf(&b, key, "HMGET %s %s {fence}", key, name) < 0 || rp_addf(&b, key, "TIME") < 0) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (rp_run(rp, &b, err, errlen) != 0)
        goto fail;
    const redisReply *hm = rp_reply(&b, 0);
    int64_t now_ms;
    if (hm->type != REDIS_REPLY_ARRAY || hm->elements != 2 || rconn_time_ms(rp_reply(&b, 1), &now_ms) != 0) {
        snprintf(err, errlen, "redis: unexpected reply to HMGET or TIME: %s",
                 hm->type == REDIS_REPLY_ERROR ? hm->str : "another shape");
        goto fail;
    }
    const redisReply *v = hm->element[0];
    /* "OWNER REQ HOLDS FENCE EXPIRES" (see seckill_lock_acquire); an entry
     * whose lease has run out is a free lock, not yet overwritten. */
    long long holds = 0, fence = 0, expires = 0;
    if (v->type == REDIS_REPLY_STRING &&
        sscanf(v->str, "%63s %*s %lld %lld %lld", out->owner, &holds, &fence, &expires) == 4 &&
        expires > now_ms) {
        out->held = true;
        out->holds = holds;
        out->fence = fence;
        out->ttl_ms = expires - now_ms;
    } else {
        out->owner[0] = '\0';
    }
    if (hm->element[1]->type == REDIS_REPLY_STRING)
        util_parse_i64(hm->element[1]->str, 0, INT64_MAX, &out->last_fence);
    ret = 0;
fail:
    rp_batch_free(&b);
    rp_close(rp);
    return ret;
}
