/* bench/lockbench: the lock alone, and what it costs Redis.
 *
 * Four scenarios through the real lock API, each for SECONDS:
 *   uncontended  16 workers, each with its own lock_client and its own name:
 *                acquire + release (an op is one pair)
 *   hotkey       16 workers on one name, waiting for each other (an op is one
 *                pair that got the lock)
 *   batch        16 workers, each lock_acquire_many + lock_release_many of 100
 *                names of its own (an op is one key)
 *   renew        RENEW_CLIENTS clients holding RENEW_LOCKS locks each with a
 *                300 ms lease, so the watchdogs renew them every 100 ms (an op
 *                is one renewal; the locks must never be lost)
 *   redislock    the limit beside uncontended: the same 16 workers doing the
 *                least a lease lock does in Redis, what bsm/redislock and
 *                redis-py's Lock send (SET NAME TOKEN NX PX, then EVALSHA of
 *                "DEL if GET is my token"): no fence, no re-entry, no
 *                request id. Two round trips an op, as ours. It runs as the
 *                ACL user BENCH_LOCK_LIMIT_USER, password in
 *                BENCH_LOCK_LIMIT_PASSWORD_FILE (bench/run makes one allowed
 *                only this, on the bench's keys): no service's user may SET
 *                or EVAL. Proven from the server's counters, or the bench
 *                fails: as many SETs as EVALSHAs as ops, and a DEL inside
 *                every one (each release found its token).
 *
 * Redis's cost comes from INFO commandstats, before and after each scenario
 * (CONFIG RESETSTAT is not ours to run on a shared Redis). The server times a
 * function call (fcall) including the commands it runs inside, and also
 * lists those inner commands under their own names: so the time is the sum
 * over the commands a client sends (fcall, fcall_ro), and the inner
 * commands are only counted, as "Redis commands per op". Other clients of the
 * same Redis show up under the same names; each scenario is therefore
 * preceded by a quiet window as long as itself (default 1 s, BENCH_LOCK_BG_S),
 * whose rates are subtracted, and the raw figures are printed too. INFO cpu
 * adds what commandstats leaves out (socket reads and writes, the event loop),
 * for everyone's traffic.
 *
 * Fewer workers (BENCH_LOCK_WORKERS, 1..16) leave Redis less preempted on a
 * small machine: commandstats times a call in wall-clock time, so a script
 * that lost the CPU half-way counts the wait too.
 *
 * Prints "key value" lines; lock_redis_us_per_op (uncontended) and
 * lock_batch_redis_us_per_key (batch) are the headline figures.
 *   build/bench/lockbench [CONFIG] [SECONDS] [SCENARIO]   (config/seckill.cfg, 3 s, all)
 * One scenario alone is for `strace -f -c`: syscalls per op on the client. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cfg.h"
#include "lock.h"
#include "rpipe.h"
#include "secret.h"
#include "util.h"

enum {
    WORKERS = 16, /* the default, and the most (BENCH_LOCK_WORKERS) */
    BATCH = 100,
    RENEW_CLIENTS = 4,
    RENEW_LOCKS = 500,
    RENEW_TTL_MS = 300,
    HOT_WAIT_MS = 10000,
    MAX_CMDS = 256,
};

/* The commands a lock client sends itself; everything else in the delta ran
 * inside them (or belongs to someone else). set and evalsha are the
 * redislock limit's; nothing else here sends them. */
static const char *const sent_cmds[] = { "fcall", "fcall_ro", "set", "evalsha", NULL };

/* The release every SET NX PX lock sends (redis-py's Lock, bsm/redislock). */
static const char release_lua[] = "if redis.call('get', KEYS[1]) == ARGV[1] then "
                                  "return redis.call('del', KEYS[1]) else return 0 end";

struct cmdstat {
    char name[48];
    int64_t calls, usec;
};

struct snap {
    struct cmdstat c[MAX_CMDS];
    size_t n;
    double cpu_s; /* used_cpu_user + used_cpu_sys */
    int64_t at_ms;
};

struct delta {
    double sent_calls, sent_usec, inner_calls, cpu_us;
    double set_calls, evalsha_calls, del_calls; /* the redislock limit's proof */
};

/* Add one primary's INFO commandstats (r) and INFO cpu to s. 0 or -1. */
static int snap_add(struct snap *s, const redisReply *r, const redisReply *cpu)
{
    if (r == NULL || cpu == NULL || r->type != REDIS_REPLY_STRING || cpu->type != REDIS_REPLY_STRING)
        return -1;
    for (const char *line = strstr(r->str, "cmdstat_"); line; line = strstr(line + 1, "cmdstat_")) {
        char name[48];
        long long calls, usec;
        if (sscanf(line, "cmdstat_%47[^:]:calls=%lld,usec=%lld", name, &calls, &usec) != 3)
            continue;
        size_t k = 0;
        while (k < s->n && strcmp(s->c[k].name, name) != 0)
            k++;
        if (k == s->n) {
            if (s->n == MAX_CMDS)
                continue;
            snprintf(s->c[s->n++].name, sizeof(s->c[0].name), "%s", name);
        }
        s->c[k].calls += calls;
        s->c[k].usec += usec;
    }
    const char *u = strstr(cpu->str, "used_cpu_user:"), *y = strstr(cpu->str, "used_cpu_sys:");
    if (u)
        s->cpu_s += strtod(u + 14, NULL);
    if (y)
        s->cpu_s += strtod(y + 13, NULL);
    return 0;
}

/* The counters of every primary, added up: on a Redis Cluster the lock
 * groups spread over the shards. */
static int snap_take(struct rp *rp, struct snap *s)
{
    char err[256];
    memset(s, 0, sizeof(*s));
    for (int node = 0; node < rp_nodes(rp); node++) {
        struct rp_batch b;
        rp_batch_init(&b);
        bool ok = rp_addf(&b, NULL, "INFO commandstats") >= 0 && rp_addf(&b, NULL, "INFO cpu") >= 0 &&
                  rp_run_on(rp, node, &b, err, sizeof(err)) == 0 && snap_add(s, rp_reply(&b, 0), rp_reply(&b, 1)) == 0;
        rp_batch_free(&b);
        if (!ok)
            return -1;
    }
    s->at_ms = util_mono_ms();
    return 0;
}

static const struct cmdstat *snap_find(const struct snap *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->c[i].name, name) == 0)
            return &s->c[i];
    return NULL;
}

static bool is_sent(const char *name)
{
    for (const char *const *p = sent_cmds; *p; p++)
        if (strcmp(*p, name) == 0)
            return true;
    return false;
}

/* b - a. A command missing from a (first call in between) counts from 0; the
 * bench's own INFO calls are left out. */
static void snap_delta(const struct snap *a, const struct snap *b, struct delta *d)
{
    memset(d, 0, sizeof(*d));
    for (size_t i = 0; i < b->n; i++) {
        const struct cmdstat *x = &b->c[i], *o = snap_find(a, x->name);
        if (strcmp(x->name, "info") == 0)
            continue;
        double calls = (double)(x->calls - (o ? o->calls : 0)), usec = (double)(x->usec - (o ? o->usec : 0));
        d->set_calls += strcmp(x->name, "set") == 0 ? calls : 0;
        d->evalsha_calls += strcmp(x->name, "evalsha") == 0 ? calls : 0;
        d->del_calls += strcmp(x->name, "del") == 0 ? calls : 0;
        if (is_sent(x->name)) {
            d->sent_calls += calls;
            d->sent_usec += usec;
        } else {
            d->inner_calls += calls;
        }
    }
    d->cpu_us = (b->cpu_s - a->cpu_s) * 1e6;
}

/* --- the scenarios --------------------------------------------------------- */

enum scenario { SC_UNCONTENDED, SC_HOTKEY, SC_BATCH, SC_RENEW, SC_REDISLOCK };
static const char *const sc_name[] = { "uncontended", "hotkey", "batch", "renew", "redislock" };

struct bench {
    struct cfg *cfg;
    const char *limit_user;      /* the redislock limit's ACL user */
    struct secret *limit_pw;     /* and its password */
    char release_sha[48];        /* SCRIPT LOAD of release_lua */
    int workers;
    char tag[64];
    enum scenario sc;
    atomic_bool stop;
    atomic_int ready;
    atomic_uint_fast64_t ops, errors;
    atomic_uint_fast64_t live_ops; /* counted as they happen, for the windows */
};

struct worker {
    struct bench *b;
    int id;
    struct lock_client *lc;
    struct rp *rp; /* the redislock limit's connection */
};

static void name_of(char *buf, size_t len, const struct bench *b, int worker, int i)
{
    snprintf(buf, len, "%s:%s:%d:%d", b->tag, sc_name[b->sc], worker, i);
}

/* One op of the redislock limit: SET NX PX, then the release script. */
static bool redislock_op(struct worker *w, const char *name, const char *token)
{
    char err[256];
    enum rp_status st;
    redisReply *r = rp_callf(w->rp, name, &st, err, sizeof(err), "SET %s %s NX PX 30000", name, token);
    bool ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
    freeReplyObject(r);
    if (!ok)
        return false;
    r = rp_callf(w->rp, name, &st, err, sizeof(err), "EVALSHA %s 1 %s %s", w->b->release_sha, name, token);
    ok = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    return ok;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct bench *b = w->b;
    char names[BATCH][96];
    const char *np[BATCH];
    struct lock *locks[BATCH];
    int st[BATCH];
    uint64_t ops = 0, errors = 0;

    for (int i = 0; i < BATCH; i++) {
        name_of(names[i], sizeof(names[i]), b, b->sc == SC_HOTKEY ? 0 : w->id, b->sc == SC_HOTKEY ? 0 : i);
        np[i] = names[i];
    }
    /* The redislock limit's lock is a key of its own, under the bench's prefix. */
    char key[256];
    snprintf(key, sizeof(key), "%s:%s", b->cfg->redis.key_prefix, names[0]);
    b->ready++;
    while (!b->stop) {
        if (b->sc == SC_BATCH) {
            size_t got = lock_acquire_many(w->lc, np, BATCH, 0, locks, st);
            size_t k = 0;
            for (size_t i = 0; i < BATCH; i++)
                if (st[i] == LOCK_OK)
                    locks[k++] = locks[i];
            errors += BATCH - got;
            lock_release_many(w->lc, locks, k, st);
            for (size_t i = 0; i < k; i++)
                if (st[i] == LOCK_OK)
                    ops++;
                else
                    errors++;
            b->live_ops += k;
            continue;
        }
        if (b->sc == SC_REDISLOCK) {
            char token[40];
            snprintf(token, sizeof(token), "%d-%" PRIu64, w->id, ops + errors);
            if (redislock_op(w, key, token))
                ops++;
            else
                errors++;
            b->live_ops++;
            continue;
        }
        struct lock *l;
        int wait = b->sc == SC_HOTKEY ? HOT_WAIT_MS : 0;
        if (lock_acquire(w->lc, names[0], 0, wait, &l) != LOCK_OK) {
            errors++;
            continue;
        }
        if (lock_release(w->lc, l) == LOCK_OK)
            ops++;
        else
            errors++;
        b->live_ops++;
    }
    b->ops += ops;
    b->errors += errors;
    return NULL;
}

/* The renewal scenario's work is the watchdogs'; this thread only holds. */
static int run_renew(struct bench *b, struct lock_client **lcs, int64_t run_ms, struct rp *rc,
                     struct snap *s1, struct snap *s2, uint64_t *renewals, uint64_t *lost)
{
    static char names[RENEW_CLIENTS][RENEW_LOCKS][96];
    static const char *np[RENEW_LOCKS];
    static struct lock *locks[RENEW_CLIENTS][RENEW_LOCKS];
    static int st[RENEW_LOCKS];
    struct lock_counters k0[RENEW_CLIENTS], k;
    int ret = 0;

    for (int c = 0; c < RENEW_CLIENTS; c++) {
        for (int i = 0; i < RENEW_LOCKS; i++) {
            name_of(names[c][i], sizeof(names[c][i]), b, c, i);
            np[i] = names[c][i];
        }
        if (lock_acquire_many(lcs[c], np, RENEW_LOCKS, 0, locks[c], st) != RENEW_LOCKS)
            ret = -1;
    }
    /* Only the renewals are measured, not taking and releasing the locks. */
    for (int c = 0; c < RENEW_CLIENTS; c++)
        lock_client_counters(lcs[c], &k0[c]);
    if (snap_take(rc, s1) != 0)
        ret = -1;
    util_sleep_ms(run_ms);
    *renewals = *lost = 0;
    for (int c = 0; c < RENEW_CLIENTS; c++) {
        lock_client_counters(lcs[c], &k);
        *renewals += k.renewals - k0[c].renewals;
        *lost += k.lost - k0[c].lost;
    }
    if (snap_take(rc, s2) != 0)
        ret = -1;
    for (int c = 0; c < RENEW_CLIENTS; c++) {
        size_t n = 0;
        for (int i = 0; i < RENEW_LOCKS; i++)
            if (locks[c][i])
                locks[c][n++] = locks[c][i];
        lock_release_many(lcs[c], locks[c], n, st);
    }
    return ret;
}

/* The run cut into windows of WINDOW_MS, each with its own commandstats
 * delta: Redis times a command in wall-clock time, so a window in which the
 * server lost the CPU to another process counts the wait too. The quietest
 * windows show what the commands cost when they ran undisturbed. */
enum { WINDOW_MS = 200, MAX_WINDOWS = 1000 };

static void sample_windows(struct bench *b, struct rp *rc, int64_t run_ms, double *us_per_op, int *n)
{
    struct snap *s = malloc(2 * sizeof(*s));
    int64_t end = util_mono_ms() + run_ms;
    *n = 0;
    if (s == NULL || snap_take(rc, &s[0]) != 0) {
        free(s);
        util_sleep_ms(run_ms);
        return;
    }
    uint64_t ops0 = b->live_ops;
    while (util_mono_ms() < end && *n < MAX_WINDOWS) {
        util_sleep_ms(WINDOW_MS);
        if (snap_take(rc, &s[1]) != 0)
            break;
        uint64_t ops1 = b->live_ops;
        struct delta d;
        snap_delta(&s[0], &s[1], &d);
        if (ops1 > ops0)
            us_per_op[(*n)++] = d.sent_usec / (double)(ops1 - ops0);
        s[0] = s[1];
        ops0 = ops1;
    }
    free(s);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void print_kv(const char *sc, const char *key, double v)
{
    printf("lock_%s_%s %.2f\n", sc, key, v);
}

/* The redislock limit ran the branch it claims: every op one SET that
 * took the lock and one EVALSHA that deleted it, by the client's count and
 * the server's (less the quiet window's traffic, 1 % allowed). 0 or -1. */
static bool near(double x, double ops)
{
    return x >= ops * 0.99 && x <= ops * 1.01;
}

static int redislock_proof(const struct bench *b, const struct delta *d, const struct delta *bg, double scale)
{
    double ops = (double)b->ops, set = d->set_calls - bg->set_calls * scale,
           eval = d->evalsha_calls - bg->evalsha_calls * scale, del = d->del_calls - bg->del_calls * scale;
    printf("lock_redislock_proof ops=%.0f set=%.0f evalsha=%.0f del=%.0f errors=%" PRIu64 "\n", ops, set, eval, del,
           (uint64_t)b->errors);
    if (ops > 0 && b->errors == 0 && near(set, ops) && near(eval, ops) && near(del, ops))
        return 0;
    fprintf(stderr, "lockbench: the redislock limit is not proven: %.0f ops, %" PRIu64
                    " errors, %.0f SET, %.0f EVALSHA, %.0f DEL (each must match the ops)\n",
            ops, (uint64_t)b->errors, set, eval, del);
    return -1;
}

/* A scenario's headline figures, less the quiet window's traffic. */
struct result {
    double us_per_op;     /* Redis command time */
    double cpu_us_per_op; /* Redis CPU (INFO cpu) */
};

static int run(struct bench *b, struct rp *rc, int64_t run_ms, int64_t bg_ms, struct result *res)
{
    struct lock_client *lcs[WORKERS] = { 0 };
    struct rp *rps[WORKERS] = { 0 };
    struct worker w[WORKERS];
    pthread_t th[WORKERS];
    int nclients = b->sc == SC_RENEW ? RENEW_CLIENTS : b->workers, started = 0, ret = -1;
    struct snap s0, s1, s2;
    struct delta bg, d;
    char err[256];
    uint64_t renewals = 0, lost = 0;
    const char *sc = sc_name[b->sc];
    static double win[MAX_WINDOWS];
    int nwin = 0;

    b->stop = false;
    b->ready = 0;
    b->ops = b->errors = b->live_ops = 0;
    for (int i = 0; i < nclients; i++)
        if (b->sc == SC_REDISLOCK ? rp_open_user(b->cfg, b->limit_user, b->limit_pw, &rps[i], err, sizeof(err))
                                  : lock_client_open(b->cfg, &lcs[i], err, sizeof(err))) {
            fprintf(stderr, "lockbench: %s\n", err);
            goto fail;
        }
    /* The quiet window: everyone else's traffic, to subtract. */
    if (snap_take(rc, &s0) != 0)
        goto fail;
    util_sleep_ms(bg_ms);

    if (b->sc == SC_RENEW) {
        if (run_renew(b, lcs, run_ms, rc, &s1, &s2, &renewals, &lost) != 0) {
            fprintf(stderr, "lockbench: renew: not every lock was acquired, or no INFO\n");
            goto fail;
        }
        b->ops = renewals;
    } else {
        if (snap_take(rc, &s1) != 0)
            goto fail;
        for (int i = 0; i < nclients; i++) {
            w[i] = (struct worker){ b, i, lcs[i], rps[i] };
            if (pthread_create(&th[i], NULL, worker_main, &w[i]) != 0)
                break;
            started++;
        }
        int64_t until = util_mono_ms() + 10000;
        while (b->ready < started && util_mono_ms() < until)
            util_sleep_ms(1);
        sample_windows(b, rc, run_ms, win, &nwin);
        b->stop = true;
        for (int i = 0; i < started; i++)
            pthread_join(th[i], NULL);
        if (snap_take(rc, &s2) != 0)
            goto fail;
    }

    snap_delta(&s0, &s1, &bg);
    snap_delta(&s1, &s2, &d);
    double secs = (double)(s2.at_ms - s1.at_ms) / 1000.0,
           scale = bg_ms > 0 && s1.at_ms > s0.at_ms ? secs * 1000.0 / (double)(s1.at_ms - s0.at_ms) : 0;
    double ops = (double)b->ops, per = ops > 0 ? 1.0 / ops : 0;
    print_kv(sc,
             b->sc == SC_BATCH   ? "keys_per_s"
             : b->sc == SC_RENEW ? "renewals_per_s"
                                 : "ops_per_s",
             ops / secs);
    print_kv(sc, "ops", ops);
    print_kv(sc, "errors", (double)b->errors);
    if (b->sc == SC_RENEW)
        print_kv(sc, "lost", (double)lost);
    print_kv(sc, "raw_script_calls_per_op", d.sent_calls * per);
    print_kv(sc, "raw_redis_us_per_op", d.sent_usec * per);
    print_kv(sc, "raw_redis_cmds_per_op", d.inner_calls * per);
    print_kv(sc, "bg_script_calls", bg.sent_calls * scale);
    print_kv(sc, "bg_redis_usec", bg.sent_usec * scale);
    double calls = d.sent_calls - bg.sent_calls * scale, usec = d.sent_usec - bg.sent_usec * scale;
    if (calls < 0)
        calls = 0;
    if (usec < 0)
        usec = 0;
    print_kv(sc, "script_calls_per_op", calls * per);
    print_kv(sc, "redis_us_per_script_call", calls > 0 ? usec / calls : 0);
    print_kv(sc, "redis_us_per_op", usec * per);
    print_kv(sc, "redis_cmds_per_op", (d.inner_calls - bg.inner_calls * scale) * per);
    res->cpu_us_per_op = (d.cpu_us - bg.cpu_us * scale) * per;
    print_kv(sc, "redis_cpu_us_per_op", res->cpu_us_per_op);
    print_kv(sc, "redis_cpu_busy", d.cpu_us / (secs * 1e6));
    if (nwin > 0) {
        /* Raw per window: only meaningful on a Redis of the bench's own. */
        qsort(win, (size_t)nwin, sizeof(win[0]), cmp_double);
        print_kv(sc, "windows", nwin);
        print_kv(sc, "redis_us_per_op_window_min", win[0]);
        print_kv(sc, "redis_us_per_op_window_p25", win[nwin / 4]);
        print_kv(sc, "redis_us_per_op_window_median", win[nwin / 2]);
    }
    fflush(stdout);
    res->us_per_op = usec * per;
    ret = b->sc == SC_REDISLOCK ? redislock_proof(b, &d, &bg, scale) : 0;
fail:
    for (int i = 0; i < nclients; i++) {
        lock_client_close(lcs[i]);
        rp_close(rps[i]);
    }
    /* Nothing to clean up: the locks were released, and what a group's
     * hash keeps (its last fence) must stay. */
    return ret;
}

/* The redislock limit's user and password, and its release script loaded
 * (EVALSHA, as the clients it stands for send it). 0 or -1. */
static int limit_open(struct bench *b, char *err, size_t errlen)
{
    const char *pwfile = getenv("BENCH_LOCK_LIMIT_PASSWORD_FILE");
    struct rp *p = NULL;
    enum rp_status st;
    redisReply *r = NULL;
    int ret = -1;

    b->limit_user = getenv("BENCH_LOCK_LIMIT_USER");
    if (b->limit_user == NULL || pwfile == NULL) {
        snprintf(err, errlen, "the redislock limit needs BENCH_LOCK_LIMIT_USER and BENCH_LOCK_LIMIT_PASSWORD_FILE "
                              "(bench/run makes the user)");
        return -1;
    }
    if (secret_read(pwfile, &b->limit_pw, err, errlen) != 0 ||
        rp_open_user(b->cfg, b->limit_user, b->limit_pw, &p, err, errlen) != 0)
        goto fail;
    r = rp_callf(p, NULL, &st, err, errlen, "SCRIPT LOAD %s", release_lua);
    if (r == NULL || r->type != REDIS_REPLY_STRING || r->len >= sizeof(b->release_sha)) {
        if (r)
            snprintf(err, errlen, "SCRIPT LOAD: %s", r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        goto fail;
    }
    snprintf(b->release_sha, sizeof(b->release_sha), "%s", r->str);
    ret = 0;
fail:
    freeReplyObject(r);
    rp_close(p);
    return ret;
}

int main(int argc, char **argv)
{
    struct cfg c = { 0 };
    struct bench b = { 0 };
    struct rp *rc = NULL;
    char err[512];
    const char *path = argc > 1 ? argv[1] : "config/seckill.cfg";
    int64_t secs = 3, bg_s = 1, workers = WORKERS;
    int ret = 1;

    if ((argc > 2 && util_parse_i64(argv[2], 1, 3600, &secs) != 0) ||
        (getenv("BENCH_LOCK_BG_S") && util_parse_i64(getenv("BENCH_LOCK_BG_S"), 0, 3600, &bg_s) != 0) ||
        (getenv("BENCH_LOCK_WORKERS") &&
         util_parse_i64(getenv("BENCH_LOCK_WORKERS"), 1, WORKERS, &workers) != 0)) {
        fprintf(stderr, "usage: lockbench [CONFIG] [SECONDS] [uncontended|hotkey|batch|renew|redislock]\n");
        return 2;
    }
    if (cfg_load(path, &c, err, sizeof(err)) != 0) {
        fprintf(stderr, "lockbench: %s\n", err);
        goto fail;
    }
    /* Keys of our own: <prefix>:lockbench:PID:..., nothing a service reads. */
    char prefix[128];
    snprintf(prefix, sizeof(prefix), "%s:lockbench:%d", c.redis.key_prefix, (int)getpid());
    free(c.redis.key_prefix);
    c.redis.key_prefix = strdup(prefix);
    snprintf(b.tag, sizeof(b.tag), "lb");
    b.cfg = &c;
    b.workers = (int)workers;
    printf("lock_workers %d\n", b.workers);
    if (c.redis.key_prefix == NULL || rp_open(&c, cfg_role_self(), &rc, err, sizeof(err)) != 0) {
        fprintf(stderr, "lockbench: %s\n", err);
        goto fail;
    }
    const char *only = argc > 3 ? argv[3] : NULL;
    if ((only == NULL || strcmp(only, "redislock") == 0) && limit_open(&b, err, sizeof(err)) != 0) {
        fprintf(stderr, "lockbench: %s\n", err);
        goto fail;
    }
    struct result res[SC_REDISLOCK + 1] = { 0 };
    for (int s = SC_UNCONTENDED; s <= SC_REDISLOCK; s++) {
        if (only && strcmp(only, sc_name[s]) != 0)
            continue;
        b.sc = (enum scenario)s;
        /* A short lease for the renewal scenario only. */
        c.lock.ttl_ms = s == SC_RENEW ? RENEW_TTL_MS : c.lock.ttl_ms;
        if (run(&b, rc, secs * 1000, bg_s * 1000, &res[s]) != 0)
            goto fail;
    }
    if (only == NULL) {
        const struct result *u = &res[SC_UNCONTENDED], *l = &res[SC_REDISLOCK];
        printf("lock_redis_us_per_op %.2f\nlock_batch_redis_us_per_key %.2f\n", u->us_per_op,
               res[SC_BATCH].us_per_op);
        /* Ours beside the least a lease lock costs, the same run. */
        printf("lock_redis_cpu_vs_redislock %.3f\n", l->cpu_us_per_op > 0 ? u->cpu_us_per_op / l->cpu_us_per_op : 0);
    }
    ret = 0;
fail:
    rp_close(rc);
    secret_free(b.limit_pw);
    cfg_free(&c);
    return ret;
}
