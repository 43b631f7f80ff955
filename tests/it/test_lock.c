/* The distributed lock against the stack's real Redis and PostgreSQL. */
#include "harness.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "keys.h"
#include "lock.h"

static struct lock_client *open_client(void)
{
    struct lock_client *lc = NULL;
    char err[256];
    if (lock_client_open(&harness_conf, &lc, err, sizeof(err)) != 0)
        fail_msg("lock_client_open: %s", err);
    return lc;
}

/* The hash of the lock's group, from keys.c: the layout (a hash per group
 * of names, a field per lock) is its business, not the tests'. */
static const char *lock_key(const char *name)
{
    static char k[KEYS_MAX];
    assert_true(keys_lock(k, sizeof(k), harness_conf.redis.key_prefix, name) > 0);
    return k;
}

/* Whether Redis still has an entry for NAME: a release deletes it, a lease
 * that runs out leaves it (free, for the next acquisition to overwrite). */
static bool key_exists(const char *name)
{
    redisContext *rc = harness_redis(&harness_conf);
    long long n = harness_int(rc, "HEXISTS %s %s", lock_key(name), name);
    redisFree(rc);
    return n == 1;
}

/* Whether NAME is held now, as Redis's clock judges its lease. */
static bool lock_held_now(const char *name, int64_t *ttl_ms)
{
    struct lock_info li;
    char err[256];
    if (lock_inspect(&harness_conf, name, &li, err, sizeof(err)) != 0)
        fail_msg("lock_inspect %s: %s", name, err);
    if (ttl_ms)
        *ttl_ms = li.ttl_ms;
    return li.held;
}

/* fence_advance() in PostgreSQL: the check the consumer's writes make. */
static bool pg_fence_advance(PGconn *pg, const char *name, int64_t fence)
{
    char f[24];
    snprintf(f, sizeof(f), "%" PRId64, fence);
    const char *p[] = { name, f };
    PGresult *res = PQexecParams(pg, "SELECT fence_advance($1, $2)", 2, NULL, p, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        fail_msg("fence_advance: %s", PQerrorMessage(pg));
    bool ok = PQgetvalue(res, 0, 0)[0] == 't';
    PQclear(res);
    return ok;
}

static void pg_fence_forget(PGconn *pg, const char *name)
{
    const char *p[] = { name };
    PQclear(PQexecParams(pg, "DELETE FROM lock_fences WHERE lock_name = $1", 1, NULL, p, NULL, NULL, 0));
}

/* N processes increment a counter with a non-atomic read-modify-write under
 * the lock. Any overlap would lose an increment or trip the "inside" flag;
 * fences recorded under the lock must be strictly increasing. */
static void test_mutual_exclusion_and_increasing_fences(void **state)
{
    (void)state;
    enum { PROCS = 4, ROUNDS = 25 };
    const char *name = "counter";
    pid_t pids[PROCS];

    for (int p = 0; p < PROCS; p++) {
        pids[p] = fork();
        assert_true(pids[p] >= 0);
        if (pids[p] == 0) {
            struct lock_client *lc = NULL;
            char err[256];
            int bad = 0;
            if (lock_client_open(&harness_conf, &lc, err, sizeof(err)) != 0)
                _exit(10);
            redisContext *rc = harness_redis(&harness_conf);
            for (int i = 0; i < ROUNDS && !bad; i++) {
                struct lock *l;
                if (lock_acquire(lc, name, 0, 20000, &l) != LOCK_OK) {
                    bad = 11;
                    break;
                }
                redisReply *r = redisCommand(rc, "SET %s:inside 1 NX", harness_conf.redis.key_prefix);
                if (r == NULL || r->type != REDIS_REPLY_STATUS)
                    bad = 12; /* someone else is inside */
                freeReplyObject(r);
                long long v = harness_int(rc, "GET %s:counter", harness_conf.redis.key_prefix);
                freeReplyObject(redisCommand(rc, "SET %s:counter %lld", harness_conf.redis.key_prefix, v < 0 ? 1 : v + 1));
                freeReplyObject(redisCommand(rc, "RPUSH %s:fences %lld", harness_conf.redis.key_prefix,
                                             (long long)lock_fence(l)));
                freeReplyObject(redisCommand(rc, "DEL %s:inside", harness_conf.redis.key_prefix));
                if (lock_release(lc, l) != LOCK_OK)
                    bad = 13;
            }
            redisFree(rc);
            lock_client_close(lc);
            _exit(bad);
        }
    }
    for (int p = 0; p < PROCS; p++) {
        int st;
        assert_int_equal(waitpid(pids[p], &st, 0), pids[p]);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
    redisContext *rc = harness_redis(&harness_conf);
    assert_int_equal(harness_int(rc, "GET %s:counter", harness_conf.redis.key_prefix), PROCS * ROUNDS);
    redisReply *r = harness_cmd(rc, "LRANGE %s:fences 0 -1", harness_conf.redis.key_prefix);
    assert_int_equal(r->elements, PROCS * ROUNDS);
    long long prev = 0;
    for (size_t i = 0; i < r->elements; i++) {
        long long f = strtoll(r->element[i]->str, NULL, 10);
        assert_true(f > prev);
        prev = f;
    }
    freeReplyObject(r);
    redisFree(rc);
    assert_false(key_exists(name));
}

static void test_reentrant_hold_count(void **state)
{
    (void)state;
    struct lock_client *a = open_client(), *b = open_client();
    struct lock *l1, *l2, *lb;
    assert_int_equal(lock_acquire(a, "reent", 0, 0, &l1), LOCK_OK);
    assert_int_equal(lock_acquire(a, "reent", 0, 0, &l2), LOCK_OK);
    assert_ptr_equal(l1, l2);
    assert_int_equal(lock_holds(l1), 2);
    assert_int_equal(lock_acquire(b, "reent", 0, 0, &lb), LOCK_BUSY);
    assert_int_equal(lock_release(a, l1), LOCK_OK);
    assert_true(key_exists("reent")); /* one hold left */
    assert_int_equal(lock_acquire(b, "reent", 0, 0, &lb), LOCK_BUSY);
    assert_int_equal(lock_release(a, l2), LOCK_OK);
    assert_false(key_exists("reent"));
    assert_int_equal(lock_acquire(b, "reent", 0, 0, &lb), LOCK_OK);
    assert_int_equal(lock_release(b, lb), LOCK_OK);
    lock_client_close(a);
    lock_client_close(b);
}

/* ttl 1500 ms means 1.5 s: not 1500 s, not 1.5 ms (the seeds' unit bugs). */
static void test_ttl_is_milliseconds(void **state)
{
    (void)state;
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    pid_t pid = fork();
    if (pid == 0) {
        struct lock_client *lc = NULL;
        struct lock *l;
        char err[256];
        if (lock_client_open(&harness_conf, &lc, err, sizeof(err)) != 0 || lock_acquire(lc, "ttl", 1500, 0, &l) != LOCK_OK)
            _exit(1);
        if (write(pipefd[1], "x", 1) != 1)
            _exit(1);
        pause(); /* held until killed: the lease must then end by itself */
        _exit(0);
    }
    char x;
    assert_int_equal(read(pipefd[0], &x, 1), 1);
    int64_t t0 = util_mono_ms();
    int64_t pttl;
    assert_true(lock_held_now("ttl", &pttl));
    assert_true(pttl > 1000 && pttl <= 1500);
    struct lock_info li;
    char err[256];
    assert_int_equal(lock_inspect(&harness_conf, "ttl", &li, err, sizeof(err)), 0);
    kill(pid, SIGKILL); /* no release, no renewal */
    waitpid(pid, NULL, 0);
    bool gone;
    WAIT_UNTIL(!lock_held_now("ttl", NULL), 10000, gone);
    assert_true(gone);
    int64_t took = util_mono_ms() - t0;
    assert_true(took >= 900 && took <= 5000);
    /* The entry outlives its lease, free, until the next holder overwrites
     * it with a larger fence and a hold count of its own. */
    assert_true(key_exists("ttl"));
    struct lock_client *b = open_client();
    struct lock *lb;
    assert_int_equal(lock_acquire(b, "ttl", 0, 0, &lb), LOCK_OK);
    assert_int_equal(lock_holds(lb), 1);
    assert_true(lock_fence(lb) > li.fence);
    assert_int_equal(lock_release(b, lb), LOCK_OK);
    assert_false(key_exists("ttl"));
    lock_client_close(b);
    close(pipefd[0]);
    close(pipefd[1]);
}

static void test_renewal_keeps_lock_for_many_ttls(void **state)
{
    (void)state;
    struct lock_client *a = open_client(), *b = open_client();
    struct lock *l, *lb;
    assert_int_equal(lock_acquire(a, "renew", 300, 0, &l), LOCK_OK);
    int64_t end = util_mono_ms() + 6 * 300;
    while (util_mono_ms() < end) {
        assert_false(lock_lost(l));
        assert_int_equal(lock_acquire(b, "renew", 300, 0, &lb), LOCK_BUSY);
        util_sleep_ms(50);
    }
    struct lock_counters k;
    lock_client_counters(a, &k);
    assert_true(k.renewals >= 6);
    assert_int_equal(k.lost, 0);
    assert_int_equal(lock_release(a, l), LOCK_OK);
    /* renewal stops at release: the key stays gone */
    assert_false(key_exists("renew"));
    lock_client_counters(a, &k);
    uint64_t renewals = k.renewals;
    assert_int_equal(lock_acquire(b, "renew", 300, 0, &lb), LOCK_OK);
    assert_int_equal(lock_release(b, lb), LOCK_OK);
    lock_client_counters(a, &k);
    assert_int_equal(k.renewals, renewals);
    lock_client_close(a);
    lock_client_close(b);
}

/* Release racing the watchdog's renewal must never leave a key behind. */
static void test_renewal_racing_release_leaves_no_key(void **state)
{
    (void)state;
    struct lock_client *a = open_client();
    for (int i = 0; i < 60; i++) {
        struct lock *l;
        assert_int_equal(lock_acquire(a, "race", 150, 1000, &l), LOCK_OK); /* renews every 50 ms */
        util_sleep_ms((int64_t)util_rand_below(70));
        assert_int_equal(lock_release(a, l), LOCK_OK);
        assert_false(key_exists("race"));
    }
    lock_client_close(a);
}

/* Waiting is bounded by the deadline, with backoff rather than spinning. */
static void test_wait_is_bounded(void **state)
{
    (void)state;
    struct lock_client *a = open_client(), *b = open_client();
    struct lock *l, *lb;
    assert_int_equal(lock_acquire(a, "wait", 10000, 0, &l), LOCK_OK);
    int64_t t0 = util_mono_ms();
    assert_int_equal(lock_acquire(b, "wait", 0, 300, &lb), LOCK_BUSY);
    int64_t took = util_mono_ms() - t0;
    assert_true(took >= 300 && took < 3000);
    struct lock_counters k;
    lock_client_counters(b, &k);
    assert_int_equal(k.timeouts, 1);
    assert_int_equal(k.contended, 1);
    /* once a releases, b gets it */
    assert_int_equal(lock_release(a, l), LOCK_OK);
    assert_int_equal(lock_acquire(b, "wait", 0, 300, &lb), LOCK_OK);
    assert_int_equal(lock_release(b, lb), LOCK_OK);
    lock_client_close(a);
    lock_client_close(b);
}

/* A holder frozen past its lease is overtaken; its release deletes nothing;
 * its fence loses against the new holder's in PostgreSQL. */
static void test_frozen_holder_overtaken_and_fenced(void **state)
{
    (void)state;
    int up[2], down[2];
    const char *name = "frozen";
    char pgname[128];
    snprintf(pgname, sizeof(pgname), "%s/%s", harness_conf.redis.key_prefix, name);
    assert_int_equal(pipe(up), 0);
    assert_int_equal(pipe(down), 0);
    pid_t pid = fork();
    if (pid == 0) {
        struct lock_client *lc = NULL;
        struct lock *l;
        char err[256], go;
        if (lock_client_open(&harness_conf, &lc, err, sizeof(err)) != 0 || lock_acquire(lc, name, 500, 0, &l) != LOCK_OK)
            _exit(20);
        int64_t fence = lock_fence(l);
        if (write(up[1], &fence, sizeof(fence)) != sizeof(fence) || read(down[0], &go, 1) != 1)
            _exit(21);
        /* resumed after SIGCONT: the lease must be known lost, the write
         * refused by the fence, and the release a no-op */
        int result = 0;
        if (!lock_lost(l))
            result |= 1;
        PGconn *pg = harness_pg(&harness_conf);
        if (pg_fence_advance(pg, pgname, fence))
            result |= 2;
        PQfinish(pg);
        if (lock_release(lc, l) != LOCK_NOT_HELD)
            result |= 4;
        lock_client_close(lc);
        _exit(result);
    }
    int64_t old_fence;
    assert_int_equal(read(up[0], &old_fence, sizeof(old_fence)), sizeof(old_fence));
    assert_int_equal(kill(pid, SIGSTOP), 0);

    bool expired;
    WAIT_UNTIL(!lock_held_now(name, NULL), 10000, expired);
    assert_true(expired);
    struct lock_client *b = open_client();
    struct lock *lb;
    assert_int_equal(lock_acquire(b, name, 10000, 0, &lb), LOCK_OK);
    assert_true(lock_fence(lb) > old_fence);
    PGconn *pg = harness_pg(&harness_conf);
    pg_fence_forget(pg, pgname);
    assert_true(pg_fence_advance(pg, pgname, lock_fence(lb)));

    assert_int_equal(kill(pid, SIGCONT), 0);
    assert_int_equal(write(down[1], "g", 1), 1);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0); /* lost, fenced out, release a no-op */

    /* the new holder still holds it */
    assert_true(key_exists(name));
    assert_false(lock_lost(lb));
    assert_int_equal(lock_release(b, lb), LOCK_OK);
    pg_fence_forget(pg, pgname);
    PQfinish(pg);
    lock_client_close(b);
    close(up[0]), close(up[1]), close(down[0]), close(down[1]);
}

/* --- a proxy that loses the reply to the first acquire ------------------- */

struct proxy {
    int listen_fd;
    int port;
    int drop_armed; /* drop the reply to the next FCALL once */
    pthread_t thread;
};

static void *proxy_conn(void *arg);
struct proxy_conn {
    struct proxy *p;
    int cfd;
};

static void *proxy_main(void *arg)
{
    struct proxy *p = arg;
    for (;;) {
        int cfd = accept(p->listen_fd, NULL, NULL);
        if (cfd < 0)
            return NULL;
        struct proxy_conn *pc = malloc(sizeof(*pc));
        pc->p = p;
        pc->cfd = cfd;
        pthread_t t;
        pthread_create(&t, NULL, proxy_conn, pc);
        pthread_detach(t);
    }
}

static void *proxy_conn(void *arg)
{
    struct proxy_conn *pc = arg;
    int cfd = pc->cfd;
    struct proxy *p = pc->p;
    free(pc);
    int sfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)harness_conf.redis.port) };
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(sfd, (struct sockaddr *)&a, sizeof(a)) != 0)
        goto out;
    int dropping = 0;
    for (;;) {
        struct pollfd fds[2] = { { cfd, POLLIN, 0 }, { sfd, POLLIN, 0 } };
        if (poll(fds, 2, -1) < 0)
            break;
        char buf[8192];
        if (fds[0].revents) {
            ssize_t n = read(cfd, buf, sizeof(buf));
            if (n <= 0)
                break;
            if (__atomic_load_n(&p->drop_armed, __ATOMIC_SEQ_CST) && memmem(buf, (size_t)n, "FCALL", 5)) {
                __atomic_store_n(&p->drop_armed, 0, __ATOMIC_SEQ_CST);
                dropping = 1;
            }
            if (write(sfd, buf, (size_t)n) != n)
                break;
        }
        if (fds[1].revents) {
            ssize_t n = read(sfd, buf, sizeof(buf));
            if (n <= 0)
                break;
            if (dropping)
                break; /* Redis did the work; the client never hears of it */
            if (write(cfd, buf, (size_t)n) != n)
                break;
        }
    }
out:
    close(sfd);
    close(cfd);
    return NULL;
}

static struct proxy proxy; /* outlives the test: its threads may still run */

static void proxy_start(struct proxy *p)
{
    memset(p, 0, sizeof(*p));
    p->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET };
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    socklen_t al = sizeof(a);
    assert_int_equal(bind(p->listen_fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(p->listen_fd, 8), 0);
    getsockname(p->listen_fd, (struct sockaddr *)&a, &al);
    p->port = ntohs(a.sin_port);
    pthread_create(&p->thread, NULL, proxy_main, p);
}

static void proxy_stop(struct proxy *p)
{
    shutdown(p->listen_fd, SHUT_RDWR);
    close(p->listen_fd);
    pthread_join(p->thread, NULL);
}

static void test_lost_reply_does_not_double_acquire(void **state)
{
    (void)state;
    struct proxy *p = &proxy;
    proxy_start(p);

    /* The client under test talks to Redis through the proxy. */
    struct cfg via = harness_conf;
    via.redis.port = p->port;
    struct lock_client *lc = NULL;
    char err[256];
    assert_int_equal(lock_client_open(&via, &lc, err, sizeof(err)), 0);
    __atomic_store_n(&p->drop_armed, 1, __ATOMIC_SEQ_CST);
    struct lock *l;
    assert_int_equal(lock_acquire(lc, "lostreply", 0, 2000, &l), LOCK_OK);
    assert_int_equal(__atomic_load_n(&p->drop_armed, __ATOMIC_SEQ_CST), 0); /* the reply really was dropped */
    struct lock_counters k;
    lock_client_counters(lc, &k);
    assert_true(k.errors >= 1);

    /* one hold, not two: a single release frees it */
    assert_int_equal(lock_holds(l), 1);
    redisContext *rc = harness_redis(&harness_conf);
    struct lock_info li;
    assert_int_equal(lock_inspect(&harness_conf, "lostreply", &li, err, sizeof(err)), 0);
    assert_true(li.held);
    assert_int_equal(li.holds, 1);
    struct lock_client *b = open_client();
    struct lock *lb;
    assert_int_equal(lock_acquire(b, "lostreply", 0, 0, &lb), LOCK_BUSY);
    assert_int_equal(lock_release(lc, l), LOCK_OK);
    assert_false(key_exists("lostreply"));
    assert_int_equal(lock_acquire(b, "lostreply", 0, 0, &lb), LOCK_OK);
    assert_int_equal(lock_release(b, lb), LOCK_OK);
    lock_client_close(b);
    lock_client_close(lc);
    redisFree(rc);
    proxy_stop(p);
}

/* How many lock groups (script calls) n names span. */
static size_t groups_of(const char *const *names, size_t n)
{
    bool seen[KEYS_LOCK_GROUPS] = { false };
    size_t g = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned grp = keys_lock_group(names[i]);
        if (!seen[grp]) {
            seen[grp] = true;
            g++;
        }
    }
    return g;
}

static void test_batch_acquire_and_release_one_round_trip(void **state)
{
    (void)state;
    enum { N = 10 };
    struct lock_client *a = open_client(), *b = open_client();
    const char *names[N];
    char buf[N][32];
    struct lock *locks[N], *other;
    int st[N];
    for (int i = 0; i < N; i++) {
        snprintf(buf[i], sizeof(buf[i]), "user:%d", 1000 + i);
        names[i] = buf[i];
    }
    assert_int_equal(lock_acquire(b, names[3], 0, 0, &other), LOCK_OK);

    redisContext *rc = harness_redis(&harness_conf);
    long long calls_before = -1;
    redisReply *info = harness_cmd(rc, "INFO commandstats");
    const char *s = strstr(info->str, "cmdstat_fcall:calls=");
    calls_before = s ? strtoll(s + 20, NULL, 10) : 0;
    freeReplyObject(info);

    struct lock_counters k0, k1;
    lock_client_counters(a, &k0);
    assert_int_equal(lock_acquire_many(a, names, N, 0, locks, st), N - 1);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], i == 3 ? LOCK_BUSY : LOCK_OK);
    assert_null(locks[3]);
    info = harness_cmd(rc, "INFO commandstats");
    s = strstr(info->str, "cmdstat_fcall:calls=");
    assert_non_null(s);
    /* one script call per group of names, not per name (the client's own
     * count is exact; Redis's is shared with whoever else uses it) */
    lock_client_counters(a, &k1);
    assert_int_equal(k1.calls - k0.calls, groups_of(names, N));
    assert_true(strtoll(s + 20, NULL, 10) - calls_before >= (long long)groups_of(names, N));
    freeReplyObject(info);

    /* fences are per lock and all fresh */
    for (int i = 0; i < N; i++)
        if (i != 3)
            assert_true(lock_fence(locks[i]) > 0);

    struct lock *held[N - 1];
    int hst[N - 1], k = 0;
    for (int i = 0; i < N; i++)
        if (i != 3)
            held[k++] = locks[i];
    lock_release_many(a, held, N - 1, hst);
    for (int i = 0; i < N - 1; i++)
        assert_int_equal(hst[i], LOCK_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(key_exists(names[i]), i == 3);
    assert_int_equal(lock_release(b, other), LOCK_OK);
    redisFree(rc);
    lock_client_close(a);
    lock_client_close(b);
}

/* --- the leaner lock: groups, request ids, the watchdog's wake-up --------- */

/* A batch over many groups with a name another client holds and a name this
 * client already holds: one script call per group, the busy one BUSY and
 * untouched, the held one re-entered (same handle, same fence, two holds),
 * the rest fresh. The release frees all but the re-entered one. */
static void test_batch_over_groups_busy_and_reentry(void **state)
{
    (void)state;
    enum { N = 40, BUSY = 7, REENTER = 21 };
    struct lock_client *a = open_client(), *b = open_client();
    char buf[N][32];
    const char *names[N];
    struct lock *locks[N], *other, *mine;
    int st[N];
    for (int i = 0; i < N; i++) {
        snprintf(buf[i], sizeof(buf[i]), "grp:%d", i);
        names[i] = buf[i];
    }
    size_t groups = groups_of(names, N);
    assert_true(groups >= 8); /* the batch really spans many groups */
    assert_int_equal(lock_acquire(b, names[BUSY], 0, 0, &other), LOCK_OK);
    assert_int_equal(lock_acquire(a, names[REENTER], 0, 0, &mine), LOCK_OK);
    int64_t mine_fence = lock_fence(mine);

    struct lock_counters k0, k1;
    lock_client_counters(a, &k0);
    assert_int_equal(lock_acquire_many(a, names, N, 0, locks, st), N - 1);
    lock_client_counters(a, &k1);
    assert_int_equal(k1.calls - k0.calls, groups);
    for (int i = 0; i < N; i++) {
        assert_int_equal(st[i], i == BUSY ? LOCK_BUSY : LOCK_OK);
        if (i == BUSY)
            continue;
        assert_true(lock_fence(locks[i]) > 0);
        assert_int_equal(lock_holds(locks[i]), i == REENTER ? 2 : 1);
        char err[256];
        struct lock_info li;
        assert_int_equal(lock_inspect(&harness_conf, names[i], &li, err, sizeof(err)), 0);
        assert_true(li.held);
        assert_int_equal(li.holds, i == REENTER ? 2 : 1);
        assert_int_equal(li.fence, lock_fence(locks[i]));
    }
    assert_ptr_equal(locks[REENTER], mine);
    assert_int_equal(lock_fence(mine), mine_fence);
    assert_null(locks[BUSY]);

    struct lock *held[N];
    int hst[N], n = 0;
    for (int i = 0; i < N; i++)
        if (i != BUSY)
            held[n++] = locks[i];
    lock_client_counters(a, &k0);
    lock_release_many(a, held, (size_t)n, hst);
    lock_client_counters(a, &k1);
    /* the busy name's group may still be needed by the others' release */
    assert_true(k1.calls - k0.calls <= groups);
    for (int i = 0; i < n; i++)
        assert_int_equal(hst[i], LOCK_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(key_exists(names[i]), i == BUSY || i == REENTER);
    assert_int_equal(lock_holds(mine), 1);
    assert_int_equal(lock_release(a, mine), LOCK_OK);
    assert_false(key_exists(names[REENTER]));
    assert_int_equal(lock_release(b, other), LOCK_OK);
    lock_client_close(a);
    lock_client_close(b);
}

/* A name twice in one batch is taken once and re-entered once (the script
 * reads all the group's locks before writing any: the second must see the
 * first's acquisition). */
static void test_batch_same_name_twice(void **state)
{
    (void)state;
    struct lock_client *a = open_client();
    const char *names[] = { "twice:a", "twice:b", "twice:a" };
    struct lock *locks[3];
    int st[3];
    assert_int_equal(lock_acquire_many(a, names, 3, 0, locks, st), 3);
    assert_ptr_equal(locks[0], locks[2]);
    assert_int_equal(lock_holds(locks[0]), 2);
    char err[256];
    struct lock_info li;
    assert_int_equal(lock_inspect(&harness_conf, "twice:a", &li, err, sizeof(err)), 0);
    assert_int_equal(li.holds, 2);
    assert_int_equal(lock_release(a, locks[0]), LOCK_OK);
    assert_true(key_exists("twice:a"));
    assert_int_equal(lock_release(a, locks[2]), LOCK_OK);
    assert_false(key_exists("twice:a"));
    assert_int_equal(lock_release(a, locks[1]), LOCK_OK);
    lock_client_close(a);
}

/* Fences stay strictly increasing per name across batches, single
 * acquisitions and clients, and the counter remembers the last one. */
static void test_fences_monotonic_across_batches(void **state)
{
    (void)state;
    enum { N = 12, ROUNDS = 20 };
    struct lock_client *c[2] = { open_client(), open_client() };
    char buf[N][32];
    const char *names[N];
    int64_t last[N] = { 0 };
    struct lock *locks[N];
    int st[N];
    for (int i = 0; i < N; i++) {
        snprintf(buf[i], sizeof(buf[i]), "mono:%d", i);
        names[i] = buf[i];
    }
    for (int r = 0; r < ROUNDS; r++) {
        struct lock_client *lc = c[r % 2];
        if (r % 3 == 2) {
            for (int i = 0; i < N; i++)
                assert_int_equal(lock_acquire(lc, names[i], 0, 0, &locks[i]), LOCK_OK);
        } else {
            assert_int_equal(lock_acquire_many(lc, names, N, 0, locks, st), N);
        }
        for (int i = 0; i < N; i++) {
            assert_true(lock_fence(locks[i]) > last[i]);
            last[i] = lock_fence(locks[i]);
        }
        lock_release_many(lc, locks, N, st);
        for (int i = 0; i < N; i++)
            assert_int_equal(st[i], LOCK_OK);
    }
    char err[256];
    struct lock_info li;
    assert_int_equal(lock_inspect(&harness_conf, names[0], &li, err, sizeof(err)), 0);
    assert_false(li.held);
    assert_int_equal(li.last_fence, last[0]);
    lock_client_close(c[0]);
    lock_client_close(c[1]);
}

/* The watchdog sleeps until its earliest renewal. A long lease first puts it
 * to sleep for a third of a minute; a short lease taken afterwards must wake
 * it, or that lease would run out unrenewed. */
static void test_watchdog_wakes_for_sooner_lease(void **state)
{
    (void)state;
    struct lock_client *a = open_client(), *b = open_client();
    struct lock *longl, *shortl, *lb;
    assert_int_equal(lock_acquire(a, "wake:long", 60000, 0, &longl), LOCK_OK);
    struct lock_counters k0, k;
    lock_client_counters(a, &k0);
    /* Round trips of someone else's before the short lease give the
     * watchdog the time to go back to its 20 s sleep (no fixed sleep: were
     * it still awake, the test would pass without proving the wake-up, never
     * fail falsely). */
    char err[256];
    struct lock_info li;
    assert_int_equal(lock_inspect(&harness_conf, "wake:long", &li, err, sizeof(err)), 0);
    assert_true(li.held);
    assert_int_equal(lock_acquire(a, "wake:short", 300, 0, &shortl), LOCK_OK);
    int64_t end = util_mono_ms() + 6 * 300;
    while (util_mono_ms() < end) {
        assert_false(lock_lost(shortl));
        assert_int_equal(lock_acquire(b, "wake:short", 300, 0, &lb), LOCK_BUSY);
        util_sleep_ms(50);
    }
    lock_client_counters(a, &k);
    assert_true(k.renewals - k0.renewals >= 6);
    assert_int_equal(k.lost, 0);
    assert_false(lock_lost(longl));
    assert_int_equal(lock_release(a, shortl), LOCK_OK);
    assert_int_equal(lock_release(a, longl), LOCK_OK);

    /* And again from idle: the first lease after all were released wakes a
     * watchdog that had nothing to wait for. */
    assert_int_equal(lock_acquire(a, "wake:short", 300, 0, &shortl), LOCK_OK);
    lock_client_counters(a, &k0);
    bool renewed;
    WAIT_UNTIL((lock_client_counters(a, &k), k.renewals >= k0.renewals + 3), 5000, renewed);
    assert_true(renewed);
    assert_false(lock_lost(shortl));
    assert_int_equal(lock_release(a, shortl), LOCK_OK);
    assert_false(key_exists("wake:short"));
    lock_client_close(a);
    lock_client_close(b);
}

/* A lease whose key vanished (data loss, or expired and taken over) is
 * reported lost by the watchdog's batched renewal, the other leases of the
 * same renewal round are not, and the new holder's fence is larger. */
static void test_lost_lease_reported_in_batch(void **state)
{
    (void)state;
    enum { N = 6 };
    struct lock_client *a = open_client(), *b = open_client();
    char buf[N][32];
    const char *names[N];
    struct lock *locks[N], *lb;
    int st[N];
    for (int i = 0; i < N; i++) {
        snprintf(buf[i], sizeof(buf[i]), "gone:%d", i);
        names[i] = buf[i];
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(lock_acquire(a, names[i], 600, 0, &locks[i]), LOCK_OK);
    int64_t old_fence = lock_fence(locks[2]);
    redisContext *rc = harness_redis(&harness_conf);
    freeReplyObject(harness_cmd(rc, "HDEL %s %s", lock_key(names[2]), names[2]));
    assert_int_equal(lock_acquire(b, names[2], 10000, 0, &lb), LOCK_OK);
    assert_true(lock_fence(lb) > old_fence);
    bool lost;
    WAIT_UNTIL(lock_lost(locks[2]), 5000, lost);
    assert_true(lost);
    struct lock_counters k;
    lock_client_counters(a, &k);
    assert_int_equal(k.lost, 1);
    for (int i = 0; i < N; i++)
        if (i != 2)
            assert_false(lock_lost(locks[i]));
    lock_release_many(a, locks, N, st);
    for (int i = 0; i < N; i++)
        assert_int_equal(st[i], i == 2 ? LOCK_NOT_HELD : LOCK_OK);
    assert_true(key_exists(names[2])); /* b's lock untouched */
    assert_int_equal(lock_release(b, lb), LOCK_OK);
    redisFree(rc);
    lock_client_close(a);
    lock_client_close(b);
}

/* A batch whose replies are lost: the client resends every call with the
 * same request ids, and no lock counts a second hold. */
static void test_lost_reply_batch_idempotent(void **state)
{
    (void)state;
    enum { N = 20 };
    struct proxy *p = &proxy;
    proxy_start(p);
    struct cfg via = harness_conf;
    via.redis.port = p->port;
    struct lock_client *lc = NULL;
    char err[256], buf[N][32];
    const char *names[N];
    struct lock *locks[N];
    int st[N];
    for (int i = 0; i < N; i++) {
        snprintf(buf[i], sizeof(buf[i]), "lostbatch:%d", i);
        names[i] = buf[i];
    }
    assert_int_equal(lock_client_open(&via, &lc, err, sizeof(err)), 0);
    __atomic_store_n(&p->drop_armed, 1, __ATOMIC_SEQ_CST);
    assert_int_equal(lock_acquire_many(lc, names, N, 2000, locks, st), N);
    assert_int_equal(__atomic_load_n(&p->drop_armed, __ATOMIC_SEQ_CST), 0);
    struct lock_counters k;
    lock_client_counters(lc, &k);
    assert_true(k.errors >= 1);
    for (int i = 0; i < N; i++) {
        struct lock_info li;
        assert_int_equal(lock_holds(locks[i]), 1);
        assert_int_equal(lock_inspect(&harness_conf, names[i], &li, err, sizeof(err)), 0);
        assert_int_equal(li.holds, 1);
    }
    lock_release_many(lc, locks, N, st);
    for (int i = 0; i < N; i++) {
        assert_int_equal(st[i], LOCK_OK);
        assert_false(key_exists(names[i]));
    }
    lock_client_close(lc);
    proxy_stop(p);
}

/* Redis restarts (AOF on) while a lock is held: the holder keeps it and the
 * watchdog renews again once Redis is back. Then Redis loses its data: the
 * holder learns it lost the lease, and the next holder's fence still wins
 * in the database against the old one (the fence is not a counter that
 * restarts from zero). The lease outlasts the restart: a restarted Redis
 * answers LOADING until it has read its append-only file back, and every
 * renewal meanwhile fails; with a 6 s lease a busy machine's restart outlasted
 * it (CI, 2026-12-05; here with an 859 MB file: "unexpected reply to renew:
 * LOADING", then the lease lost by the holder's clock, rightly). */
#define RESTART_LEASE_MS 20000
static void test_redis_restart_and_data_loss(void **state)
{
    (void)state;
    const char *name = "restart";
    char pgname[128];
    snprintf(pgname, sizeof(pgname), "%s/%s", harness_conf.redis.key_prefix, name);
    struct lock_client *a = open_client();
    struct lock *l;
    assert_int_equal(lock_acquire(a, name, RESTART_LEASE_MS, 0, &l), LOCK_OK);
    int64_t fence_a = lock_fence(l);
    struct lock_counters k0, k;
    lock_client_counters(a, &k0);

    harness_redis_restart();
    assert_true(key_exists(name)); /* AOF kept it */
    bool renewed;
    /* a renewal every third of the lease */
    WAIT_UNTIL((lock_client_counters(a, &k), k.renewals > k0.renewals), RESTART_LEASE_MS, renewed);
    assert_true(renewed);
    assert_false(lock_lost(l));

    /* data loss */
    redisContext *rc = harness_redis(&harness_conf);
    freeReplyObject(harness_cmd(rc, "DEL %s", lock_key(name))); /* the group's lock and last fence */
    bool lost;
    WAIT_UNTIL(lock_lost(l), RESTART_LEASE_MS, lost);
    assert_true(lost);

    struct lock_client *b = open_client();
    struct lock *lb;
    assert_int_equal(lock_acquire(b, name, 6000, 0, &lb), LOCK_OK);
    assert_true(lock_fence(lb) > fence_a);
    PGconn *pg = harness_pg(&harness_conf);
    pg_fence_forget(pg, pgname);
    assert_true(pg_fence_advance(pg, pgname, fence_a));      /* a wrote before the loss */
    assert_true(pg_fence_advance(pg, pgname, lock_fence(lb))); /* not wedged: b wins */
    assert_false(pg_fence_advance(pg, pgname, fence_a));     /* a is fenced out */
    pg_fence_forget(pg, pgname);
    PQfinish(pg);
    assert_int_equal(lock_release(a, l), LOCK_NOT_HELD);
    assert_int_equal(lock_release(b, lb), LOCK_OK);
    redisFree(rc);
    lock_client_close(a);
    lock_client_close(b);
}

/* A group's hash has a TTL of about a day (so the entries of holders that
 * died unreleased do not stay forever), refreshed once half of it is used,
 * and keeps the group's last fence after every lock in it is released. */
static void test_group_hash_ttl_and_last_fence(void **state)
{
    (void)state;
    const long long day = 24LL * 3600 * 1000;
    struct lock_client *a = open_client();
    struct lock *l;
    assert_int_equal(lock_acquire(a, "grp", 0, 0, &l), LOCK_OK);
    int64_t fence = lock_fence(l);
    redisContext *rc = harness_redis(&harness_conf);
    long long pttl = harness_int(rc, "PTTL %s", lock_key("grp"));
    assert_true(pttl > day / 2 && pttl <= day);
    assert_int_equal(lock_release(a, l), LOCK_OK);
    assert_false(key_exists("grp"));
    struct lock_info li;
    char err[256];
    assert_int_equal(lock_inspect(&harness_conf, "grp", &li, err, sizeof(err)), 0);
    assert_false(li.held);
    assert_true(li.last_fence >= fence);

    /* As if the TTL had been set long ago: the next acquisition renews it. */
    freeReplyObject(harness_cmd(rc, "HSET %s {kept} 0", lock_key("grp")));
    freeReplyObject(harness_cmd(rc, "PEXPIRE %s 60000", lock_key("grp")));
    assert_int_equal(lock_acquire(a, "grp", 0, 0, &l), LOCK_OK);
    assert_true(lock_fence(l) > fence);
    pttl = harness_int(rc, "PTTL %s", lock_key("grp"));
    assert_true(pttl > day / 2 && pttl <= day);
    /* and so does a renewal, for a lock held longer than the TTL's half */
    freeReplyObject(harness_cmd(rc, "HSET %s {kept} 0", lock_key("grp")));
    freeReplyObject(harness_cmd(rc, "PEXPIRE %s 60000", lock_key("grp")));
    struct lock_counters k0, k;
    lock_client_counters(a, &k0);
    bool renewed;
    WAIT_UNTIL((lock_client_counters(a, &k), k.renewals > k0.renewals), 30000, renewed);
    assert_true(renewed);
    pttl = harness_int(rc, "PTTL %s", lock_key("grp"));
    assert_true(pttl > day / 2 && pttl <= day);
    assert_int_equal(lock_release(a, l), LOCK_OK);
    redisFree(rc);
    lock_client_close(a);
}

/* A Redis that refuses every call (here: the group's key holds a string,
 * so the script fails with WRONGTYPE; a demoted primary's READONLY takes
 * the same path) does not grow the log with each attempt: the failure is
 * logged when it begins and once more, with its count, when it ends. */
static void test_stuck_redis_logs_once(void **state)
{
    (void)state;
    const char *name = "logs-once";
    enum { ATTEMPTS = 50 };
    char path[] = "/tmp/sktest-lock-log-XXXXXX";
    struct lock_client *lc = open_client();
    struct lock *l = NULL;
    redisContext *rc = harness_redis(&harness_conf);
    char key[KEYS_MAX];
    snprintf(key, sizeof(key), "%s", lock_key(name));
    /* the group's other locks, if any, are nobody's in this test */
    freeReplyObject(harness_cmd(rc, "SET %s stuck", key));

    int fd = mkstemp(path), saved = dup(STDERR_FILENO), refused = 0;
    assert_true(fd >= 0 && saved >= 0);
    fflush(stderr);
    dup2(fd, STDERR_FILENO);
    for (int i = 0; i < ATTEMPTS; i++)
        refused += lock_acquire(lc, name, 5000, 0, &l) == LOCK_ERROR;
    freeReplyObject(harness_cmd(rc, "DEL %s", key));
    int got = lock_acquire(lc, name, 5000, 0, &l);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(fd);

    assert_int_equal(refused, ATTEMPTS);
    assert_int_equal(got, LOCK_OK);
    assert_int_equal(lock_release(lc, l), LOCK_OK);
    assert_int_equal(harness_file_lines(path, "unexpected reply to acquire"), 1);
    char over[64];
    snprintf(over, sizeof(over), "over (a lock answered) after %d times", ATTEMPTS);
    assert_int_equal(harness_file_lines(path, over), 1);
    unlink(path);
    redisFree(rc);
    lock_client_close(lc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mutual_exclusion_and_increasing_fences),
        cmocka_unit_test(test_reentrant_hold_count),
        cmocka_unit_test(test_ttl_is_milliseconds),
        cmocka_unit_test(test_renewal_keeps_lock_for_many_ttls),
        cmocka_unit_test(test_renewal_racing_release_leaves_no_key),
        cmocka_unit_test(test_wait_is_bounded),
        cmocka_unit_test(test_frozen_holder_overtaken_and_fenced),
        cmocka_unit_test(test_lost_reply_does_not_double_acquire),
        cmocka_unit_test(test_batch_acquire_and_release_one_round_trip),
        cmocka_unit_test(test_batch_over_groups_busy_and_reentry),
        cmocka_unit_test(test_batch_same_name_twice),
        cmocka_unit_test(test_fences_monotonic_across_batches),
        cmocka_unit_test(test_watchdog_wakes_for_sooner_lease),
        cmocka_unit_test(test_lost_lease_reported_in_batch),
        cmocka_unit_test(test_lost_reply_batch_idempotent),
        cmocka_unit_test(test_redis_restart_and_data_loss),
        cmocka_unit_test(test_group_hash_ttl_and_last_fence),
        cmocka_unit_test(test_stuck_redis_logs_once),
    };
    return cmocka_run_group_tests_name("lock", tests, harness_setup, harness_teardown);
}
