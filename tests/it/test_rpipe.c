/* rpipe, the one path of every Redis round trip, against the stack's single
 * Redis (127.0.0.1:16379, harness_conf) and its Redis Cluster (scripts/stack
 * up --cluster, 127.0.0.1:16401-16406):
 * - a batch's replies come back in the caller's order, on one node and when
 *   the batch is split over the three primaries;
 * - arguments are copied and binary-safe; a function is called by name;
 * - a lost reply makes that command and every later one unknown, and
 *   nothing is sent again (the write ran once);
 * - WAIT: one node answers its replicas (none on the single Redis); on the
 *   Cluster every primary the batch wrote to confirms its replica;
 * - rp_run_on visits each primary, and only it;
 * - a program's own ACL user reads the slot map (+cluster|slots). */
#include "funclibs.h"
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rconn.h"
#include "rfunc.h"
#include "rpipe.h"
#include "secret.h"
#include "slot.h"

static char *seeds[] = { "127.0.0.1:16401", "127.0.0.1:16402", "127.0.0.1:16403" };
static struct secret *stack_pw;
static struct cfg cluster_conf; /* harness_conf with redis.cluster_nodes */
static char tag[64];

static int setup(void **state)
{
    char err[256];
    if (harness_setup(state) != 0)
        return -1;
    if (harness_stack_secret("redis-stack", &stack_pw, err, sizeof(err)) != 0) {
        fprintf(stderr, "# %s\n", err);
        return -1;
    }
    snprintf(tag, sizeof(tag), "sktest-rp%d", (int)getpid());
    if (harness_cluster_up() != 0)
        return -1;
    cluster_conf = harness_conf;
    cluster_conf.redis.cluster_nodes.v = seeds;
    cluster_conf.redis.cluster_nodes.n = 3;
    return 0;
}

static int teardown(void **state)
{
    secret_free(stack_pw);
    return harness_teardown(state);
}

static struct rp *open_as_stack(const struct cfg *c)
{
    struct rp *p = NULL;
    char err[256];
    if (rp_open_user(c, "stack", stack_pw, &p, err, sizeof(err)) != 0)
        fail_msg("rp_open_user: %s", err);
    return p;
}

/* n keys of items spread over the slots, with this run's tag. */
static void item_key(char *buf, size_t len, int i)
{
    snprintf(buf, len, "%s:{item:%d}:n", tag, 1000 + i * 7);
}

/* SET then GET of a binary value, then INCR of n keys, then GET of each:
 * the replies in the order added. */
static void check_order(struct rp *p, int n)
{
    struct rp_batch b;
    char key[96], err[256];
    const char bin[] = { 'a', '\0', 'b' };
    rp_batch_init(&b);
    item_key(key, sizeof(key), 0);
    assert_int_equal(rp_addf(&b, key, "SET %s %b", key, bin, sizeof(bin)), 0);
    assert_int_equal(rp_addf(&b, key, "GET %s", key), 1);
    for (int i = 0; i < n; i++) {
        item_key(key, sizeof(key), i + 1);
        const char *argv[] = { "INCRBY", key, "5" };
        assert_int_equal(rp_add(&b, key, 3, argv, NULL), 2 + i);
    }
    for (int i = 0; i < n; i++) {
        item_key(key, sizeof(key), i + 1);
        rp_addf(&b, key, "INCRBY %s %d", key, i);
    }
    if (rp_run(p, &b, err, sizeof(err)) != 0)
        fail_msg("rp_run: %s", err);
    const redisReply *got = rp_reply(&b, 1);
    assert_int_equal(got->type, REDIS_REPLY_STRING);
    assert_int_equal(got->len, sizeof(bin));
    assert_memory_equal(got->str, bin, sizeof(bin));
    for (int i = 0; i < n; i++) {
        assert_int_equal(rp_status(&b, 2 + i), RP_OK);
        assert_int_equal(rp_reply(&b, 2 + i)->integer, 5);
        assert_int_equal(rp_reply(&b, 2 + n + i)->integer, 5 + i); /* its own key's, in order */
    }
    rp_batch_free(&b);
}

static void del_keys(struct rp *p, int n)
{
    struct rp_batch b;
    char key[96], err[256];
    rp_batch_init(&b);
    for (int i = 0; i <= n; i++) {
        item_key(key, sizeof(key), i);
        rp_addf(&b, key, "DEL %s", key);
    }
    assert_int_equal(rp_run(p, &b, err, sizeof(err)), 0);
    rp_batch_free(&b);
}

static void test_single_order(void **state)
{
    (void)state;
    struct rp *p = open_as_stack(&harness_conf);
    assert_false(rp_cluster(p));
    assert_int_equal(rp_nodes(p), 1);
    check_order(p, 40);
    assert_int_equal(rp_stats(p)->roundtrips, 1);
    del_keys(p, 40);
    rp_close(p);
}

/* A function by name, and one Redis does not hold: counted missing. */
static void test_single_functions(void **state)
{
    (void)state;
    struct rp *p = open_as_stack(&harness_conf);
    struct rp_batch b;
    char err[256];
    const struct rfunc have = RFUNC_INIT("seckill_producer_version", &funclib_producer);
    const struct rfunc lack = RFUNC_INIT("seckill_no_such_function", &funclib_producer);
    rp_batch_init(&b);
    rp_fcall(&b, have.name, 0, 0, NULL, NULL);
    rp_fcall(&b, lack.name, 0, 0, NULL, NULL);
    assert_int_equal(rp_run(p, &b, err, sizeof(err)), 0); /* both answered: an error reply is an answer */
    assert_int_equal(rp_reply(&b, 0)->type, REDIS_REPLY_INTEGER);
    assert_int_equal(rp_reply(&b, 0)->integer, rfunc_lib_version(&funclib_producer));
    assert_int_equal(rp_classify(rp_reply(&b, 1)), RP_REPLY_NO_FUNCTION);
    assert_int_equal(b.missing, 1);
    rp_batch_free(&b);
    rp_close(p);
}

/* INCR key in a run of its own: 1 and *v when it was answered. */
static bool incr(struct rp *p, const char *key, long long *v)
{
    enum rp_status st;
    char err[256];
    redisReply *r = rp_callf(p, key, &st, err, sizeof(err), "INCR %s", key);
    bool ok = r != NULL && r->type == REDIS_REPLY_INTEGER;
    if (ok)
        *v = r->integer;
    freeReplyObject(r);
    return ok;
}

/* A reply lost behind DEBUG SLEEP (past redis.command_timeout_ms): it and
 * every later command are unknown, none is sent again, and the next run
 * reconnects. The sleep stays well under the Cluster's cluster-node-timeout
 * (2 s, scripts/stack): a primary silent past it is replaced, and its
 * replica, promoted, never saw the INCR the sleeper runs on waking (1 where
 * 2 is expected: seen once in CI with the configuration's 2 s timeout and a
 * 3 s sleep). So the command timeout here is LOST_TIMEOUT_MS, and the sleep
 * a second. */
#define LOST_TIMEOUT_MS 400
static void lost_reply(const struct cfg *conf)
{
    struct cfg c = *conf;
    c.redis.command_timeout_ms = LOST_TIMEOUT_MS;
    struct rp *p = open_as_stack(&c);
    struct rp_batch b;
    char key[96], err[256];
    int secs = 1;
    item_key(key, sizeof(key), 0);
    del_keys(p, 0);
    rp_batch_init(&b);
    rp_addf(&b, key, "DEBUG SLEEP %d", secs);
    rp_addf(&b, key, "INCR %s", key);
    assert_int_equal(rp_run(p, &b, err, sizeof(err)), -1);
    assert_int_equal(rp_status(&b, 0), RP_UNKNOWN);
    assert_int_equal(rp_status(&b, 1), RP_UNKNOWN);
    assert_null(rp_reply(&b, 1));
    assert_int_equal(rp_stats(p)->unknown, 2);
    rp_batch_free(&b);
    /* the sleeping server runs the INCR it had read, once: the next is 2 */
    long long v = 0;
    bool ok;
    WAIT_UNTIL(incr(p, key, &v), 10000, ok);
    assert_true(ok);
    assert_int_equal(v, 2);
    del_keys(p, 0);
    rp_close(p);
}

static void test_single_lost_reply(void **state)
{
    (void)state;
    lost_reply(&harness_conf);
}

/* The single Redis has no replica: a durable batch's WAIT answers 0, and
 * the batch is not confirmed by a replica. The rule is the configuration's,
 * read at each run (issue #55): with redis.min_replicas_ack 0 a durable
 * batch sends no WAIT and is never short; a batch not marked durable sends
 * none whatever the setting. */
static void test_single_wait(void **state)
{
    (void)state;
    struct rp *p = open_as_stack(&harness_conf);
    struct rp_batch b;
    char key[96], err[256];
    int want = harness_conf.redis.min_replicas_ack, wait_ms = harness_conf.redis.wait_timeout_ms;
    item_key(key, sizeof(key), 0);
    rp_batch_init(&b);
    harness_conf.redis.min_replicas_ack = 1;
    harness_conf.redis.wait_timeout_ms = 100;
    assert_int_equal(rp_durability(p), 1);
    rp_addf(&b, key, "SET %s 1", key);
    rp_durable(&b);
    assert_int_equal(rp_run(p, &b, err, sizeof(err)), 0);
    assert_int_equal(b.acked, 0);
    assert_int_equal(b.wait_replicas, 1);
    assert_true(rp_replicas_short(&b));
    /* not durable: no WAIT */
    rp_batch_reset(&b);
    rp_addf(&b, key, "SET %s 2", key);
    assert_int_equal(rp_run(p, &b, err, sizeof(err)), 0);
    assert_int_equal(b.acked, -1);
    assert_false(rp_replicas_short(&b));
    /* durable, and the setting 0: no WAIT either */
    harness_conf.redis.min_replicas_ack = 0;
    rp_batch_reset(&b);
    rp_addf(&b, key, "SET %s 3", key);
    rp_durable(&b);
    assert_int_equal(rp_run(p, &b, err, sizeof(err)), 0);
    assert_int_equal(b.acked, -1);
    assert_int_equal(b.wait_replicas, 0);
    assert_false(rp_replicas_short(&b));
    harness_conf.redis.min_replicas_ack = want;
    harness_conf.redis.wait_timeout_ms = wait_ms;
    rp_batch_free(&b);
    del_keys(p, 0);
    rp_close(p);
}

static void test_cluster_order(void **state)
{
    (void)state;
    struct rp *p = open_as_stack(&cluster_conf);
    assert_true(rp_cluster(p));
    assert_int_equal(rp_nodes(p), 3);
    check_order(p, 60);
    del_keys(p, 60);
    rp_close(p);
}

/* b run as a durable batch that asks each primary for one replica (up to
 * 1 s), whatever the stack's configuration says. */
static int run_durable(struct rp *p, struct rp_batch *b, char *err, size_t errlen)
{
    int want = cluster_conf.redis.min_replicas_ack, wait_ms = cluster_conf.redis.wait_timeout_ms;
    cluster_conf.redis.min_replicas_ack = 1;
    cluster_conf.redis.wait_timeout_ms = 1000;
    rp_durable(b);
    int ret = rp_run(p, b, err, errlen);
    cluster_conf.redis.min_replicas_ack = want;
    cluster_conf.redis.wait_timeout_ms = wait_ms;
    return ret;
}

/* The batch's keys land on every primary; each confirms its replica. */
static void test_cluster_wait(void **state)
{
    (void)state;
    struct rp *p = open_as_stack(&cluster_conf);
    struct rp_batch b;
    char key[96], err[256];
    int on[3] = { 0 };
    rp_batch_init(&b);
    for (int i = 0; i < 30; i++) {
        item_key(key, sizeof(key), i);
        rp_addf(&b, key, "SET %s x", key);
    }
    unsigned long rounds = rp_stats(p)->rounds;
    assert_int_equal(run_durable(p, &b, err, sizeof(err)), 0);
    assert_int_equal(b.acked, 1);
    assert_false(rp_replicas_short(&b));
    /* the WAITs rode behind each primary's commands: one round trip */
    assert_int_equal(rp_stats(p)->rounds, rounds + 1);
    /* and the keys really are on all three: each primary's own count */
    for (int node = 0; node < rp_nodes(p); node++) {
        struct rp_batch c;
        rp_batch_init(&c);
        for (int i = 0; i < 30; i++) {
            item_key(key, sizeof(key), i);
            rp_addf(&c, NULL, "EXISTS %s", key); /* no key: rp_run_on sends it there, no redirection */
        }
        assert_int_equal(rp_run_on(p, node, &c, err, sizeof(err)), 0);
        for (int i = 0; i < 30; i++) {
            const redisReply *r = rp_reply(&c, i);
            on[node] += r->type == REDIS_REPLY_INTEGER && r->integer == 1;
        }
        rp_batch_free(&c);
    }
    assert_true(on[0] > 0 && on[1] > 0 && on[2] > 0);
    assert_int_equal(on[0] + on[1] + on[2], 30);
    rp_batch_free(&b);
    del_keys(p, 29);
    rp_close(p);
}

/* One command on primary node, no redirection followed: its reply (the
 * caller frees it). */
static redisReply *on_node(struct rp *p, int node, int argc, const char **argv)
{
    struct rp_batch batch;
    char err[256];
    rp_batch_init(&batch);
    rp_add(&batch, NULL, argc, argv, NULL);
    if (rp_run_on(p, node, &batch, err, sizeof(err)) != 0)
        fail_msg("%s %s on node %d: %s", argv[0], argv[1], node, err);
    redisReply *r = rp_take(&batch, 0);
    rp_batch_free(&batch);
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("%s %s on node %d: %s", argv[0], argv[1], node, r->str);
    return r;
}

/* An empty slot moves from primary from to primary to, as a reshard moves
 * it: importing and migrating at its two ends, then every primary told. */
static void move_slot(struct rp *p, unsigned slot, int from, int to)
{
    char s[16], fid[64], tid[64];
    const char *myid[] = { "CLUSTER", "MYID" };
    redisReply *r = on_node(p, from, 2, myid);
    snprintf(fid, sizeof(fid), "%s", r->str);
    freeReplyObject(r);
    r = on_node(p, to, 2, myid);
    snprintf(tid, sizeof(tid), "%s", r->str);
    freeReplyObject(r);
    snprintf(s, sizeof(s), "%u", slot);
    const char *imp[] = { "CLUSTER", "SETSLOT", s, "IMPORTING", fid };
    const char *mig[] = { "CLUSTER", "SETSLOT", s, "MIGRATING", tid };
    const char *own[] = { "CLUSTER", "SETSLOT", s, "NODE", tid };
    freeReplyObject(on_node(p, to, 5, imp));
    freeReplyObject(on_node(p, from, 5, mig));
    for (int n = 0; n < rp_nodes(p); n++)
        freeReplyObject(on_node(p, n, 5, own));
}

/* A durable batch one of whose commands is redirected: the WAIT that rode
 * behind the commands went to the node that refused it, so the rule asks
 * again after it, where it ran (one more round), and the batch is
 * confirmed. */
static void test_cluster_wait_redirected(void **state)
{
    (void)state;
    struct rp *p = open_as_stack(&cluster_conf);
    struct rp_batch b;
    char key[96], err[256], s[16];
    const char *count[] = { "CLUSTER", "COUNTKEYSINSLOT", s };
    unsigned slot = 0;
    long long keys = 1;
    for (int i = 0; keys != 0; i++) { /* a slot no other key is in */
        snprintf(key, sizeof(key), "%s:{moved:%d}:k", tag, i);
        slot = slot_of(key, strlen(key));
        snprintf(s, sizeof(s), "%u", slot);
        redisReply *r = on_node(p, rp_node_of_key(p, key, strlen(key)), 3, count);
        keys = r->integer;
        freeReplyObject(r);
    }
    int from = rp_node_of_key(p, key, strlen(key)), to = (from + 1) % rp_nodes(p);
    move_slot(p, slot, from, to); /* p's map does not know yet */
    rp_batch_init(&b);
    rp_addf(&b, key, "SET %s x", key);
    for (int i = 0; i < 10; i++) {
        char k2[96];
        item_key(k2, sizeof(k2), i);
        rp_addf(&b, k2, "SET %s x", k2);
    }
    unsigned long rounds = rp_stats(p)->rounds;
    if (run_durable(p, &b, err, sizeof(err)) != 0)
        fail_msg("rp_run: %s", err);
    assert_int_equal(rp_status(&b, 0), RP_OK);
    assert_string_equal(rp_reply(&b, 0)->str, "OK");
    assert_int_equal(b.acked, 1);
    /* the commands with their WAITs, the redirected one again, its WAIT */
    assert_int_equal(rp_stats(p)->rounds, rounds + 3);
    rp_batch_free(&b);
    const char *del[] = { "DEL", key };
    redisReply *r = on_node(p, to, 2, del); /* it ran where it was sent again */
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    move_slot(p, slot, to, from); /* home again */
    del_keys(p, 9);
    rp_close(p);
}

static void test_cluster_lost_reply(void **state)
{
    (void)state;
    lost_reply(&cluster_conf);
}

/* The producer's own user: the slot map (+cluster|slots) and its functions. */
static void test_cluster_program_user(void **state)
{
    (void)state;
    struct rp *p = NULL;
    char err[256];
    if (rp_open(&cluster_conf, CFG_ROLE_PRODUCER, &p, err, sizeof(err)) != 0)
        fail_msg("rp_open as the producer: %s", err);
    const struct rfunc v = RFUNC_INIT("seckill_producer_version", &funclib_producer);
    for (int node = 0; node < rp_nodes(p); node++) {
        struct rp_batch b;
        rp_batch_init(&b);
        rp_fcall(&b, v.name, 0, 0, NULL, NULL);
        assert_int_equal(rp_run_on(p, node, &b, err, sizeof(err)), 0);
        assert_int_equal(rp_reply(&b, 0)->integer, rfunc_lib_version(&funclib_producer));
        rp_batch_free(&b);
    }
    rp_close(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_order),
        cmocka_unit_test(test_single_functions),
        cmocka_unit_test(test_single_lost_reply),
        cmocka_unit_test(test_single_wait),
        cmocka_unit_test(test_cluster_order),
        cmocka_unit_test(test_cluster_wait),
        cmocka_unit_test(test_cluster_wait_redirected),
        cmocka_unit_test(test_cluster_lost_reply),
        cmocka_unit_test(test_cluster_program_user),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
