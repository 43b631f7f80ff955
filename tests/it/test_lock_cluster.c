/* The lock and the consumer's settle on the stack's real Redis Cluster
 * (scripts/stack up --cluster: three primaries, three replicas,
 * 127.0.0.1:16401-16406), configured as the programs are
 * (config/seckill-cluster.cfg, the consumer's own ACL user):
 * - one batch over every lock group lands each group's hash on the primary
 *   that serves its slot, on all three primaries, one script call per group;
 * - exclusion and fencing hold per lock across the shards: another client
 *   is refused every lock while they are held and gets a larger fence after
 *   the release;
 * - the watchdog renews leases on every shard past several leases;
 *   lock_inspect reads each one from its group's primary;
 * - settle clears and records the orders of items on all three primaries
 *   in one call; with one shard refusing its calls (its function library
 *   deleted), the other shards' items are settled and only the refusing
 *   shard's stay in the backlog, cleared once the library is back.
 * Every check of where a key lives asks the primary itself, without
 * following a redirection: a key routed to the wrong node is not found. */
#include "funclibs.h"
#include "harness.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "keys.h"
#include "lock.h"
#include "queue.h"
#include "rconn.h"
#include "rfunc.h"
#include "secret.h"
#include "settle.h"
#include "slot.h"

#define PRIMARIES 3

static struct secret *stack_pw;
static struct slot_map map; /* the Cluster's, read at setup */

/* A connection as the user stack to one node, no redirection followed. */
static redisContext *node(const struct slot_node *n)
{
    redisContext *rc = NULL;
    char err[256];
    if (rconn_open_node(&harness_conf, n->host, n->port, "stack", stack_pw, &rc, err, sizeof(err)) != 0)
        fail_msg("%s:%d: %s", n->host, n->port, err);
    return rc;
}

/* The index in map of the primary that serves key. */
static int primary_of(const char *key)
{
    int i = map.owner[slot_of(key, strlen(key))];
    assert_true(i >= 0);
    return i;
}

static int read_map(void)
{
    static const struct slot_node seed = { "127.0.0.1", 16401 };
    char err[256];
    redisContext *rc = node(&seed);
    redisReply *r = harness_cmd(rc, "CLUSTER SLOTS");
    int ret = slot_map_read(r, &map, err, sizeof(err));
    if (ret != 0)
        fprintf(stderr, "# CLUSTER SLOTS: %s\n", err);
    freeReplyObject(r);
    redisFree(rc);
    return ret == 0 && map.nnodes == PRIMARIES && slot_map_holes(&map) == 0 ? 0 : -1;
}

static int setup(void **state)
{
    char path[512], err[256];
    snprintf(path, sizeof(path), "%s/config/seckill-cluster.cfg", harness_root());
    setenv("SECKILL_TEST_CONFIG", path, 1);
    if (harness_setup(state) != 0)
        return -1;
    if (harness_stack_secret("redis-stack", &stack_pw, err, sizeof(err)) != 0) {
        fprintf(stderr, "# %s\n", err);
        return -1;
    }
    if (harness_cluster_up() != 0)
        return -1;
    /* A primary killed by another suite may still be promoting its replica. */
    bool whole = false;
    WAIT_UNTIL(read_map() == 0, 30000, whole);
    return whole ? 0 : -1;
}

/* Every key of this suite's prefix, on every primary, and the consumer's
 * functions back on each (a test may have deleted them from one). */
static int teardown(void **state)
{
    char pattern[KEYS_MAX], err[256];
    int was;
    snprintf(pattern, sizeof(pattern), "%s:*", harness_conf.redis.key_prefix);
    for (int i = 0; i < map.nnodes; i++) {
        redisContext *rc = node(&map.node[i]);
        char cursor[32] = "0";
        do {
            redisReply *r = harness_cmd(rc, "SCAN %s MATCH %s COUNT 1000", cursor, pattern);
            snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
            for (size_t k = 0; k < r->element[1]->elements; k++)
                freeReplyObject(harness_cmd(rc, "DEL %s", r->element[1]->element[k]->str));
            freeReplyObject(r);
        } while (strcmp(cursor, "0") != 0);
        if (rfunc_load(rc, &funclib_consumer, &was, err, sizeof(err)) != 0)
            fprintf(stderr, "# FUNCTION LOAD on %s:%d: %s\n", map.node[i].host, map.node[i].port, err);
        redisFree(rc);
    }
    secret_free(stack_pw);
    /* not harness_teardown: its cleanup is the single Redis's */
    (void)state;
    cfg_free(&harness_conf);
    return 0;
}

static struct lock_client *open_client(void)
{
    struct lock_client *lc = NULL;
    char err[256];
    if (lock_client_open(&harness_conf, &lc, err, sizeof(err)) != 0)
        fail_msg("lock_client_open: %s", err);
    return lc;
}

/* One lock name per group: a batch of them spans every group. */
static char names[KEYS_LOCK_GROUPS][32];
static const char *namep[KEYS_LOCK_GROUPS];

static void pick_names(const char *tag)
{
    bool have[KEYS_LOCK_GROUPS] = { false };
    int got = 0;
    for (int i = 0; got < KEYS_LOCK_GROUPS; i++) {
        char n[32];
        snprintf(n, sizeof(n), "%s-%d", tag, i);
        unsigned g = keys_lock_group(n);
        if (have[g])
            continue;
        have[g] = true;
        snprintf(names[got], sizeof(names[got]), "%s", n);
        namep[got] = names[got];
        got++;
    }
}

/* Which primary holds lock name's field, asked of each primary directly;
 * -1 when none does. Fails when more than one does. */
static int holder_node(const char *name)
{
    char key[KEYS_MAX];
    int at = -1;
    assert_true(keys_lock(key, sizeof(key), harness_conf.redis.key_prefix, name) > 0);
    for (int i = 0; i < map.nnodes; i++) {
        redisContext *rc = node(&map.node[i]);
        redisReply *r = harness_cmd(rc, "HEXISTS %s %s", key, name);
        /* a node that does not serve the slot answers MOVED: not here */
        if (r->type == REDIS_REPLY_INTEGER && r->integer == 1) {
            assert_int_equal(at, -1);
            at = i;
        }
        freeReplyObject(r);
        redisFree(rc);
    }
    return at;
}

static void test_groups_on_every_primary(void **state)
{
    (void)state;
    struct lock_client *lc = open_client();
    struct lock *l[KEYS_LOCK_GROUPS];
    int st[KEYS_LOCK_GROUPS], used[PRIMARIES] = { 0 };
    struct lock_counters k0, k;
    pick_names("spread");

    lock_client_counters(lc, &k0);
    assert_int_equal(lock_acquire_many(lc, namep, KEYS_LOCK_GROUPS, 0, l, st), KEYS_LOCK_GROUPS);
    lock_client_counters(lc, &k);
    assert_int_equal(k.calls - k0.calls, KEYS_LOCK_GROUPS); /* one script call per group */
    for (int i = 0; i < KEYS_LOCK_GROUPS; i++) {
        char key[KEYS_MAX];
        assert_int_equal(st[i], LOCK_OK);
        assert_true(keys_lock(key, sizeof(key), harness_conf.redis.key_prefix, names[i]) > 0);
        int at = holder_node(names[i]);
        assert_int_equal(at, primary_of(key)); /* on the primary that serves its slot */
        used[at]++;
    }
    for (int p = 0; p < PRIMARIES; p++) {
        fprintf(stderr, "# %s:%d holds %d of the %d groups\n", map.node[p].host, map.node[p].port, used[p],
                KEYS_LOCK_GROUPS);
        assert_true(used[p] > 0);
    }

    lock_release_many(lc, l, KEYS_LOCK_GROUPS, st);
    for (int i = 0; i < KEYS_LOCK_GROUPS; i++) {
        assert_int_equal(st[i], LOCK_OK);
        assert_int_equal(holder_node(names[i]), -1);
    }
    lock_client_counters(lc, &k);
    assert_int_equal(k.errors, 0);
    lock_client_close(lc);
}

static void test_exclusion_and_fencing(void **state)
{
    (void)state;
    struct lock_client *a = open_client(), *b = open_client();
    struct lock *la[KEYS_LOCK_GROUPS], *lb[KEYS_LOCK_GROUPS];
    int st[KEYS_LOCK_GROUPS];
    int64_t fence[KEYS_LOCK_GROUPS];
    pick_names("excl");

    assert_int_equal(lock_acquire_many(a, namep, KEYS_LOCK_GROUPS, 0, la, st), KEYS_LOCK_GROUPS);
    for (int i = 0; i < KEYS_LOCK_GROUPS; i++)
        fence[i] = lock_fence(la[i]);
    /* every shard refuses b while a holds: a short wait, then busy */
    assert_int_equal(lock_acquire_many(b, namep, KEYS_LOCK_GROUPS, 50, lb, st), 0);
    for (int i = 0; i < KEYS_LOCK_GROUPS; i++)
        assert_int_equal(st[i], LOCK_BUSY);
    /* a's release is b's chance, with a larger fence on every shard */
    lock_release_many(a, la, KEYS_LOCK_GROUPS, st);
    assert_int_equal(lock_acquire_many(b, namep, KEYS_LOCK_GROUPS, 0, lb, st), KEYS_LOCK_GROUPS);
    for (int i = 0; i < KEYS_LOCK_GROUPS; i++)
        assert_true(lock_fence(lb[i]) > fence[i]);
    /* a, the holder no more, is refused */
    struct lock *again = NULL;
    assert_int_equal(lock_acquire(a, names[0], 0, 0, &again), LOCK_BUSY);
    lock_release_many(b, lb, KEYS_LOCK_GROUPS, st);
    for (int i = 0; i < KEYS_LOCK_GROUPS; i++)
        assert_int_equal(st[i], LOCK_OK);
    lock_client_close(a);
    lock_client_close(b);
}

static void test_renewal_on_every_shard(void **state)
{
    (void)state;
    enum { TTL_MS = 600 };
    int saved = harness_conf.lock.ttl_ms;
    harness_conf.lock.ttl_ms = TTL_MS;
    struct lock_client *lc = open_client();
    struct lock *l[KEYS_LOCK_GROUPS];
    int st[KEYS_LOCK_GROUPS];
    struct lock_counters k;
    pick_names("renew");

    assert_int_equal(lock_acquire_many(lc, namep, KEYS_LOCK_GROUPS, 0, l, st), KEYS_LOCK_GROUPS);
    int64_t t0 = util_mono_ms();
    bool renewed = false;
    /* three leases' worth of renewals of every lock */
    WAIT_UNTIL((lock_client_counters(lc, &k), k.renewals >= 3 * KEYS_LOCK_GROUPS && util_mono_ms() - t0 > 3 * TTL_MS),
               30000, renewed);
    assert_true(renewed);
    for (int i = 0; i < KEYS_LOCK_GROUPS; i++) {
        struct lock_info li;
        char err[256];
        assert_false(lock_lost(l[i]));
        assert_int_equal(lock_inspect(&harness_conf, names[i], &li, err, sizeof(err)), 0);
        assert_true(li.held);
        assert_int_equal(li.fence, lock_fence(l[i]));
        assert_true(li.ttl_ms > 0 && li.ttl_ms <= TTL_MS);
    }
    lock_client_counters(lc, &k);
    assert_int_equal(k.lost, 0);
    lock_release_many(lc, l, KEYS_LOCK_GROUPS, st);
    lock_client_close(lc);
    harness_conf.lock.ttl_ms = saved;
}

/* Items whose keys land on every primary, ITEMS_PER of each. */
enum { ITEMS_PER = 2, ORDERS = 3 };

static void pick_items(int64_t *items, int64_t base)
{
    int have[PRIMARIES] = { 0 }, got = 0;
    for (int64_t id = base; got < PRIMARIES * ITEMS_PER; id++) {
        char k[KEYS_ITEM_PARTS][KEYS_MAX];
        assert_int_equal(keys_item_all(k, harness_conf.redis.key_prefix, id), 0);
        int p = primary_of(k[KEYS_ITEM_STOCK]);
        if (have[p] == ITEMS_PER)
            continue;
        have[p]++;
        items[got++] = id;
    }
}

/* Settled orders of the items, ORDERS each from order id ob: confirmed
 * and refused in turn. */
static void settled(struct cmsg *m, struct cmsg **v, const int64_t *items, int n, int64_t ob, int64_t ub)
{
    memset(m, 0, sizeof(*m) * (size_t)(n * ORDERS));
    for (int i = 0; i < n * ORDERS; i++) {
        m[i].o = (struct order){ ob + i, ub + i, items[i / ORDERS], 1, 5 };
        m[i].outcome = i % 2 ? CMSG_INSERTED : CMSG_NO_STOCK;
        v[i] = &m[i];
    }
}

/* Orders still reserved (pending) of item, on its primary. */
static long long pending_of(redisContext *const *rc, int64_t item)
{
    char k[KEYS_ITEM_PARTS][KEYS_MAX];
    assert_int_equal(keys_item_all(k, harness_conf.redis.key_prefix, item), 0);
    return harness_int(rc[primary_of(k[KEYS_ITEM_STOCK])], "HLEN %s", k[KEYS_ITEM_PENDING]);
}

/* Reservations of ORDERS orders per item, on the item's primary. */
static void reserve(redisContext *const *rc, const int64_t *items, int n, int64_t ob)
{
    for (int i = 0; i < n; i++) {
        char k[KEYS_ITEM_PARTS][KEYS_MAX];
        assert_int_equal(keys_item_all(k, harness_conf.redis.key_prefix, items[i]), 0);
        redisContext *c = rc[primary_of(k[KEYS_ITEM_STOCK])];
        freeReplyObject(harness_cmd(c, "SET %s 10", k[KEYS_ITEM_STOCK]));
        for (int o = 0; o < ORDERS; o++) {
            long long oid = (long long)(ob + i * ORDERS + o);
            freeReplyObject(harness_cmd(c, "HSET %s %lld x", k[KEYS_ITEM_PENDING], oid));
            freeReplyObject(harness_cmd(c, "ZADD %s 1 %lld", k[KEYS_ITEM_UNPUB], oid));
        }
    }
}

static void test_settle_on_every_primary(void **state)
{
    (void)state;
    enum { N = PRIMARIES * ITEMS_PER };
    int64_t items[N], ob = (1LL << 41) + ((int64_t)getpid() << 12), ub = 600000000000LL;
    redisContext *rc[PRIMARIES];
    struct cmsg m[N * ORDERS], *v[N * ORDERS];
    struct settle *st = NULL;
    char err[256];

    for (int p = 0; p < PRIMARIES; p++)
        rc[p] = node(&map.node[p]);
    pick_items(items, 700000000000LL + (int64_t)getpid() * 1000);
    reserve(rc, items, N, ob);
    settled(m, v, items, N, ob, ub);
    assert_int_equal(settle_open(&harness_conf, 0, &st, err, sizeof(err)), 0);
    size_t back;
    assert_non_null(settle_clear(st, v, N * ORDERS, &back));
    assert_int_equal(back, N * ORDERS); /* every message back, to be reported */
    assert_int_equal(settle_backlog(st), 0);
    settle_close(st);

    /* each item's reservations gone and its statuses recorded, on its own primary */
    for (int i = 0; i < N; i++) {
        char k[KEYS_ITEM_PARTS][KEYS_MAX];
        assert_int_equal(keys_item_all(k, harness_conf.redis.key_prefix, items[i]), 0);
        redisContext *c = rc[primary_of(k[KEYS_ITEM_STOCK])];
        assert_int_equal(harness_int(c, "HLEN %s", k[KEYS_ITEM_PENDING]), 0);
        assert_int_equal(harness_int(c, "ZCARD %s", k[KEYS_ITEM_UNPUB]), 0);
        for (int o = 0; o < ORDERS; o++) {
            int j = i * ORDERS + o;
            char want[64];
            snprintf(want, sizeof(want), "%" PRId64 "|%c|5|", ub + j, j % 2 ? 'c' : 'r');
            redisReply *r = harness_cmd(c, "HGET %s o:%lld", k[KEYS_ITEM_ORDERS], (long long)(ob + j));
            assert_int_equal(r->type, REDIS_REPLY_STRING);
            if (strncmp(r->str, want, strlen(want)) != 0)
                fail_msg("order %lld: %s, want %s...", (long long)(ob + j), r->str, want);
            freeReplyObject(r);
        }
    }
    for (int p = 0; p < PRIMARIES; p++)
        redisFree(rc[p]);
}

/* How many messages of the list from m are of items on primary p. */
static int shard_count(const struct cmsg *m, int p)
{
    int n = 0;
    for (; m; m = m->next) {
        char k[KEYS_ITEM_PARTS][KEYS_MAX];
        assert_int_equal(keys_item_all(k, harness_conf.redis.key_prefix, m->o.item_id), 0);
        n += primary_of(k[KEYS_ITEM_STOCK]) == p;
    }
    return n;
}

/* One shard refuses every settle call (its library deleted, as a Redis that
 * lost its data would): the others' items are settled at once, and only the
 * refusing shard's orders wait in the backlog (the warning and the
 * all-clear count them), cleared by the idle retry once the library is
 * back. */
static void test_settle_one_shard_refusing(void **state)
{
    (void)state;
    enum { N = PRIMARIES * ITEMS_PER, STUCK = ITEMS_PER * ORDERS };
    int64_t items[N], ob = (1LL << 42) + ((int64_t)getpid() << 12), ub = 610000000000LL;
    redisContext *rc[PRIMARIES];
    struct cmsg m[N * ORDERS], *v[N * ORDERS];
    struct settle *st = NULL;
    char err[256], path[] = "/tmp/sktest-lockcl-log-XXXXXX", want[96];
    int was;

    for (int p = 0; p < PRIMARIES; p++)
        rc[p] = node(&map.node[p]);
    pick_items(items, 710000000000LL + (int64_t)getpid() * 1000); /* not the other test's items */
    reserve(rc, items, N, ob);
    settled(m, v, items, N, ob, ub);
    char k0[KEYS_ITEM_PARTS][KEYS_MAX];
    assert_int_equal(keys_item_all(k0, harness_conf.redis.key_prefix, items[0]), 0);
    int victim = primary_of(k0[KEYS_ITEM_STOCK]);
    freeReplyObject(harness_cmd(rc[victim], "FUNCTION DELETE seckill_consumer"));

    int fd = mkstemp(path), saved = dup(STDERR_FILENO);
    assert_true(fd >= 0 && saved >= 0);
    fflush(stderr);
    dup2(fd, STDERR_FILENO);
    assert_int_equal(settle_open(&harness_conf, 0, &st, err, sizeof(err)), 0);
    size_t back;
    /* handed back: every order of the other shards, none of the victim's */
    assert_int_equal(shard_count(settle_clear(st, v, N * ORDERS, &back), victim), 0);
    assert_int_equal(back, N * ORDERS - STUCK);
    int cleared = 0, stuck = 0;
    for (int i = 0; i < N; i++) {
        char k[KEYS_ITEM_PARTS][KEYS_MAX];
        assert_int_equal(keys_item_all(k, harness_conf.redis.key_prefix, items[i]), 0);
        long long left = pending_of(rc, items[i]);
        if (primary_of(k[KEYS_ITEM_STOCK]) == victim)
            stuck += left == ORDERS;
        else
            cleared += left == 0;
    }
    assert_int_equal(rfunc_load(rc[victim], &funclib_consumer, &was, err, sizeof(err)), 0);
    /* its first retry is due at once: the victim's orders come back now */
    assert_int_equal(shard_count(settle_idle(st, &back), victim), STUCK);
    assert_int_equal(back, STUCK);
    settle_close(st);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(fd);

    assert_int_equal(cleared, N - ITEMS_PER);
    assert_int_equal(stuck, ITEMS_PER);
    for (int i = 0; i < N; i++)
        assert_int_equal(pending_of(rc, items[i]), 0);
    assert_int_equal(harness_file_lines(path, "reservations wait in the backlog"), 1);
    snprintf(want, sizeof(want), "could not clear %d reservations", STUCK);
    assert_int_equal(harness_file_lines(path, want), 1);
    snprintf(want, sizeof(want), "cleared %d reservations left over", STUCK);
    assert_int_equal(harness_file_lines(path, want), 1);
    unlink(path);
    for (int p = 0; p < PRIMARIES; p++)
        redisFree(rc[p]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_groups_on_every_primary),
        cmocka_unit_test(test_exclusion_and_fencing),
        cmocka_unit_test(test_renewal_on_every_shard),
        cmocka_unit_test(test_settle_on_every_primary),
        cmocka_unit_test(test_settle_one_shard_refusing),
    };
    harness_filter();
    return cmocka_run_group_tests(tests, setup, teardown);
}
