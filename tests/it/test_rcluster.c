/* rcluster against the stack's real Redis Cluster (scripts/stack up
 * --cluster: three primaries, three replicas, 127.0.0.1:16401-16406):
 * - slot_of agrees with the nodes' own CLUSTER KEYSLOT on many keys;
 * - a batch over the items of a sale is split over all three primaries and
 *   its replies come back in the caller's order;
 * - a slot migrated behind the client's back: ASK while it migrates (the map
 *   kept), MOVED once it has (the map corrected, one refresh);
 * - a reply that is lost is reported unknown and never sent again (the write
 *   ran exactly once);
 * - a primary SIGKILLed: its keys are refused (not sent) until the Cluster
 *   promotes the replica, then reach the new primary.
 * The tests act as the stack's user stack; the programs' own ACL users get
 * the cluster commands when they move to the Cluster. */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rcluster.h"
#include "rconn.h"
#include "secret.h"

static const char *seeds[] = { "127.0.0.1:16401", "127.0.0.1:16402", "127.0.0.1:16403",
                               "127.0.0.1:16404", "127.0.0.1:16405", "127.0.0.1:16406" };
static struct secret *stack_pw;
static char tag[64];

/* A connection as the user stack to one node. */
static redisContext *node(const char *host, int port)
{
    redisContext *rc = NULL;
    char err[256];
    if (rconn_open_node(&harness_conf, host, port, "stack", stack_pw, &rc, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    return rc;
}

static struct rcl *open_cl(void)
{
    struct rcl *cl = NULL;
    char err[256];
    if (rcl_open(&harness_conf, seeds, 6, "stack", stack_pw, &cl, err, sizeof(err)) != 0)
        fail_msg("rcl_open: %s", err);
    return cl;
}

static int setup(void **state)
{
    char err[256];
    if (harness_setup(state) != 0)
        return -1;
    if (harness_stack_secret("redis-stack", &stack_pw, err, sizeof(err)) != 0) {
        fprintf(stderr, "# %s\n", err);
        return -1;
    }
    snprintf(tag, sizeof(tag), "sktest-rcl%d", (int)getpid());
    if (harness_cluster_up() != 0)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    secret_free(stack_pw);
    return harness_teardown(state);
}

/* A command of up to 4 arguments, its key the second. */
struct cmdbuf {
    const char *argv[4];
    size_t len[4];
    char key[128], val[32];
};

static void mk(struct rcl_cmd *c, struct cmdbuf *b, const char *op, const char *key, const char *val)
{
    snprintf(b->key, sizeof(b->key), "%s", key);
    b->argv[0] = op, b->argv[1] = b->key;
    int argc = 2;
    if (val) {
        snprintf(b->val, sizeof(b->val), "%s", val);
        b->argv[argc++] = b->val;
    }
    for (int i = 0; i < argc; i++)
        b->len[i] = strlen(b->argv[i]);
    memset(c, 0, sizeof(*c));
    c->key = b->key, c->keylen = b->len[1];
    c->argc = argc, c->argv = b->argv, c->argvlen = b->len;
}

static void free_replies(struct rcl_cmd *cmds, int n)
{
    for (int i = 0; i < n; i++)
        freeReplyObject(cmds[i].reply), cmds[i].reply = NULL;
}

static void test_keyslot_agrees(void **state)
{
    (void)state;
    redisContext *rc = node("127.0.0.1", 16401);
    char key[96];
    for (int i = 0; i < 500; i++) {
        /* tags, no tags, empty tags, tags not closed, item and lock keys */
        switch (i % 5) {
        case 0: snprintf(key, sizeof(key), "seckill:{item:%d}:stock", i * 7919); break;
        case 1: snprintf(key, sizeof(key), "k%08x", (unsigned)(i * 2654435761u)); break;
        case 2: snprintf(key, sizeof(key), "x{}{y%d}", i); break;
        case 3: snprintf(key, sizeof(key), "a{b%d", i); break;
        default: snprintf(key, sizeof(key), "seckill:lock:{lk:%d}", i); break;
        }
        redisReply *r = harness_cmd(rc, "CLUSTER KEYSLOT %s", key);
        assert_int_equal(r->type, REDIS_REPLY_INTEGER);
        if ((long long)slot_of(key, strlen(key)) != r->integer)
            fail_msg("%s: slot_of %u, the node says %lld", key, slot_of(key, strlen(key)), r->integer);
        freeReplyObject(r);
    }
    redisFree(rc);
}

#define ITEMS 60

static void test_batch_over_every_primary(void **state)
{
    (void)state;
    struct rcl *cl = open_cl();
    assert_int_equal(rcl_primaries(cl), 3);
    static struct rcl_cmd cmds[ITEMS];
    static struct cmdbuf bufs[ITEMS];
    char key[128], val[32];
    int per_node[3] = { 0 };
    for (int i = 0; i < ITEMS; i++) {
        snprintf(key, sizeof(key), "%s:{item:%d}:stock", tag, i);
        snprintf(val, sizeof(val), "%d", 1000 + i);
        mk(&cmds[i], &bufs[i], "SET", key, val);
        per_node[rcl_node_of_slot(cl, slot_of(key, strlen(key)))]++;
    }
    assert_true(per_node[0] > 0 && per_node[1] > 0 && per_node[2] > 0);
    char err[256];
    assert_int_equal(rcl_run(cl, cmds, ITEMS, err, sizeof(err)), 0);
    free_replies(cmds, ITEMS);
    /* read back in reverse order: each reply is its own key's */
    for (int i = 0; i < ITEMS; i++) {
        snprintf(key, sizeof(key), "%s:{item:%d}:stock", tag, ITEMS - 1 - i);
        mk(&cmds[i], &bufs[i], "GET", key, NULL);
    }
    assert_int_equal(rcl_run(cl, cmds, ITEMS, err, sizeof(err)), 0);
    for (int i = 0; i < ITEMS; i++) {
        assert_int_equal(cmds[i].status, RCL_OK);
        assert_int_equal(cmds[i].reply->type, REDIS_REPLY_STRING);
        assert_int_equal(atoi(cmds[i].reply->str), 1000 + ITEMS - 1 - i);
    }
    free_replies(cmds, ITEMS);
    /* every primary holds its share, written there and not through a redirect */
    for (int n = 0; n < 3; n++) {
        const struct slot_node *p = rcl_primary(cl, n);
        redisContext *rc = node(p->host, p->port);
        redisReply *r = harness_cmd(rc, "DBSIZE");
        assert_true(r->integer >= per_node[n]);
        freeReplyObject(r);
        redisFree(rc);
    }
    assert_int_equal(rcl_stats(cl)->moved, 0);
    assert_int_equal(rcl_stats(cl)->ask, 0);
    for (int i = 0; i < ITEMS; i++) {
        snprintf(key, sizeof(key), "%s:{item:%d}:stock", tag, i);
        mk(&cmds[i], &bufs[i], "DEL", key, NULL);
    }
    assert_int_equal(rcl_run(cl, cmds, ITEMS, err, sizeof(err)), 0);
    free_replies(cmds, ITEMS);
    rcl_close(cl);
}

/* Move slot from node src to node dst the way redis-cli --cluster reshard
 * does, one step at a time so the test can look in between. */
static void setslot(redisContext *rc, unsigned slot, const char *how, const char *id)
{
    redisReply *r = harness_cmd(rc, "CLUSTER SETSLOT %u %s %s", slot, how, id);
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("CLUSTER SETSLOT %u %s: %s", slot, how, r->str);
    freeReplyObject(r);
}

static char *myid(redisContext *rc)
{
    redisReply *r = harness_cmd(rc, "CLUSTER MYID");
    char *id = strdup(r->str);
    freeReplyObject(r);
    return id;
}

/* rcl_run_each: one command to each primary of its choosing, whatever its
 * key, all in one round; each reply is that primary's own. */
static void test_run_each(void **state)
{
    (void)state;
    struct rcl *cl = open_cl();
    struct rcl_cmd cmds[3];
    struct cmdbuf bufs[3];
    char err[256];
    assert_int_equal(rcl_primaries(cl), 3);
    for (int i = 0; i < 3; i++) {
        mk(&cmds[i], &bufs[i], "CLUSTER", "MYID", NULL);
        cmds[i].on = 2 - i; /* the map's order reversed */
    }
    unsigned long rounds = rcl_stats(cl)->rounds;
    assert_int_equal(rcl_run_each(cl, cmds, 3, err, sizeof(err)), 0);
    assert_int_equal(rcl_stats(cl)->rounds, rounds + 1);
    for (int i = 0; i < 3; i++) {
        const struct slot_node *p = rcl_primary(cl, 2 - i);
        redisContext *rc = node(p->host, p->port);
        char *id = myid(rc);
        assert_int_equal(cmds[i].status, RCL_OK);
        assert_int_equal(cmds[i].served, 2 - i);
        assert_string_equal(cmds[i].reply->str, id);
        free(id);
        redisFree(rc);
    }
    free_replies(cmds, 3);
    /* a node the map does not have: nothing is sent */
    mk(&cmds[0], &bufs[0], "CLUSTER", "MYID", NULL);
    cmds[0].on = 3;
    assert_int_equal(rcl_run_each(cl, cmds, 1, err, sizeof(err)), -1);
    assert_int_equal(cmds[0].status, RCL_NOT_SENT);
    assert_int_equal(rcl_stats(cl)->rounds, rounds + 1);
    rcl_close(cl);
}

static void test_ask_then_moved(void **state)
{
    (void)state;
    struct rcl *cl = open_cl();
    char a[128], b[128], err[256];
    /* two keys of one slot: a will migrate first, b stays behind */
    snprintf(a, sizeof(a), "%s:{item:mig}:a", tag);
    snprintf(b, sizeof(b), "%s:{item:mig}:b", tag);
    unsigned slot = slot_of(a, strlen(a));
    /* the slot is fixed ({item:mig}): clear what a failed earlier run may
     * have left half-migrated, then read the map again */
    for (int n = 0; n < 3; n++) {
        const struct slot_node *p = rcl_primary(cl, n);
        redisContext *rc = node(p->host, p->port);
        freeReplyObject(harness_cmd(rc, "CLUSTER SETSLOT %u STABLE", slot));
        redisFree(rc);
    }
    assert_int_equal(rcl_refresh(cl, err, sizeof(err)), 0);
    int s = rcl_node_of_slot(cl, slot), d = (s + 1) % 3;
    const struct slot_node *sn = rcl_primary(cl, s), *dn = rcl_primary(cl, d);
    redisContext *src = node(sn->host, sn->port), *dst = node(dn->host, dn->port);
    char *sid = myid(src), *did = myid(dst);
    freeReplyObject(harness_cmd(src, "SET %s A", a));
    freeReplyObject(harness_cmd(src, "SET %s B", b));

    setslot(dst, slot, "IMPORTING", sid);
    setslot(src, slot, "MIGRATING", did);
    redisReply *r = harness_cmd(src, "MIGRATE %s %d %s 0 5000 AUTH2 stack %s KEYS %s", dn->host, dn->port, "",
                                secret_str(stack_pw), a);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);

    static struct rcl_cmd cmds[2];
    static struct cmdbuf bufs[2];
    mk(&cmds[0], &bufs[0], "GET", a, NULL); /* gone: ASK */
    mk(&cmds[1], &bufs[1], "GET", b, NULL); /* still on the source */
    assert_int_equal(rcl_run(cl, cmds, 2, err, sizeof(err)), 0);
    assert_string_equal(cmds[0].reply->str, "A");
    assert_string_equal(cmds[1].reply->str, "B");
    free_replies(cmds, 2);
    assert_int_equal(rcl_stats(cl)->ask, 1);
    assert_int_equal(rcl_stats(cl)->moved, 0);
    assert_int_equal(rcl_node_of_slot(cl, slot), s); /* ASK changes no map */

    /* the rest goes, and the slot is the destination's on every primary */
    r = harness_cmd(src, "MIGRATE %s %d %s 0 5000 AUTH2 stack %s KEYS %s", dn->host, dn->port, "",
                    secret_str(stack_pw), b);
    freeReplyObject(r);
    for (int n = 0; n < 3; n++) {
        const struct slot_node *p = rcl_primary(cl, n);
        redisContext *rc = node(p->host, p->port);
        setslot(rc, slot, "NODE", did);
        redisFree(rc);
    }
    mk(&cmds[0], &bufs[0], "GET", b, NULL);
    assert_int_equal(rcl_run(cl, cmds, 1, err, sizeof(err)), 0);
    assert_string_equal(cmds[0].reply->str, "B");
    free_replies(cmds, 1);
    assert_int_equal(rcl_stats(cl)->moved, 1);
    assert_int_equal(rcl_node_of_slot(cl, slot), d); /* MOVED corrects the map */
    /* the next batch goes straight to the new owner (whether or not the
     * refresh MOVED asked for has run yet: it is throttled) */
    mk(&cmds[0], &bufs[0], "DEL", a, NULL);
    mk(&cmds[1], &bufs[1], "DEL", b, NULL);
    assert_int_equal(rcl_run(cl, cmds, 2, err, sizeof(err)), 0);
    assert_int_equal(cmds[0].reply->integer + cmds[1].reply->integer, 2);
    free_replies(cmds, 2);
    assert_int_equal(rcl_stats(cl)->moved, 1);
    assert_int_equal(rcl_node_of_slot(cl, slot), d);

    /* home again, for the next run */
    setslot(src, slot, "IMPORTING", did);
    setslot(dst, slot, "MIGRATING", sid);
    for (int n = 0; n < 3; n++) {
        const struct slot_node *p = rcl_primary(cl, n);
        redisContext *rc = node(p->host, p->port);
        setslot(rc, slot, "NODE", sid);
        redisFree(rc);
    }
    free(sid), free(did);
    redisFree(src), redisFree(dst);
    rcl_close(cl);
}

static void test_lost_reply_not_resent(void **state)
{
    (void)state;
    struct cfg *c = &harness_conf;
    int saved = c->redis.command_timeout_ms;
    char key[128], err[256];
    snprintf(key, sizeof(key), "%s:{item:lost}:n", tag);
    c->redis.command_timeout_ms = 200; /* the client's connections, opened at their first use */
    struct rcl *cl = open_cl();
    const struct slot_node *p = rcl_primary(cl, rcl_node_of_slot(cl, slot_of(key, strlen(key))));
    c->redis.command_timeout_ms = saved;
    redisContext *rc = node(p->host, p->port);
    c->redis.command_timeout_ms = 200;
    static struct rcl_cmd cmd;
    static struct cmdbuf buf;
    mk(&cmd, &buf, "DEL", key, NULL); /* (opens the client's connection to the node) */
    assert_int_equal(rcl_run(cl, &cmd, 1, err, sizeof(err)), 0);
    free_replies(&cmd, 1);
    /* The node sleeps for a second: the INCR waits in its socket while the
     * client gives up after 200 ms and closes the connection; the node then
     * reads it and runs it (a command that arrived is run, even from a
     * client that has gone). */
    assert_int_equal(redisAppendCommand(rc, "DEBUG SLEEP 1"), REDIS_OK);
    for (int done = 0; !done;)
        assert_int_equal(redisBufferWrite(rc, &done), REDIS_OK);
    mk(&cmd, &buf, "INCR", key, NULL);
    assert_int_equal(rcl_run(cl, &cmd, 1, err, sizeof(err)), -1);
    assert_int_equal(cmd.status, RCL_UNKNOWN);
    assert_null(cmd.reply);
    assert_int_equal(rcl_stats(cl)->lost, 1);
    redisReply *r = NULL;
    assert_int_equal(redisGetReply(rc, (void **)&r), REDIS_OK); /* the sleep is over */
    freeReplyObject(r);
    /* it ran, once */
    bool ok;
    WAIT_UNTIL(harness_int(rc, "GET %s", key) == 1, 5000, ok);
    assert_true(ok);
    /* the client goes on with a new connection, and the INCR it reported
     * unknown was not sent again: the next one makes 2, not 3 */
    mk(&cmd, &buf, "INCR", key, NULL);
    assert_int_equal(rcl_run(cl, &cmd, 1, err, sizeof(err)), 0);
    assert_int_equal(cmd.reply->integer, 2);
    free_replies(&cmd, 1);
    freeReplyObject(harness_cmd(rc, "DEL %s", key));
    redisFree(rc);
    rcl_close(cl);
    c->redis.command_timeout_ms = saved;
}

/* SET through the client: its status (the reply freed). */
static enum rcl_status try_set(struct rcl *cl, const char *key)
{
    static struct rcl_cmd cmd;
    static struct cmdbuf buf;
    char err[256];
    mk(&cmd, &buf, "SET", key, "1");
    (void)rcl_run(cl, &cmd, 1, err, sizeof(err));
    enum rcl_status st = cmd.status == RCL_OK && cmd.reply->type != REDIS_REPLY_STATUS ? RCL_NOT_SENT : cmd.status;
    free_replies(&cmd, 1);
    return st;
}

static void test_failover(void **state)
{
    (void)state;
    struct cfg *c = &harness_conf;
    int saved = c->redis.connect_timeout_ms;
    c->redis.connect_timeout_ms = 200;
    struct rcl *cl = open_cl();
    char key[128];
    snprintf(key, sizeof(key), "%s:{item:fo}:stock", tag);
    int s = rcl_node_of_slot(cl, slot_of(key, strlen(key)));
    int victim = rcl_primary(cl, s)->port;
    assert_int_equal(try_set(cl, key), RCL_OK);
    int64_t t0 = util_mono_ms();
    assert_int_equal(harness_sh("'%s/scripts/stack' kill rcluster-%d >/dev/null 2>&1", harness_root(), victim - 16400),
                     0);
    /* refused, never half-done, until the replica is promoted; then it
     * works. Meanwhile the other shards' keys are served in the same batch. */
    assert_int_not_equal(try_set(cl, key), RCL_OK);
    char other[128];
    int i = 0;
    do
        snprintf(other, sizeof(other), "%s:{item:fo%d}:stock", tag, i++);
    while (rcl_node_of_slot(cl, slot_of(other, strlen(other))) == s);
    static struct rcl_cmd two[2];
    static struct cmdbuf twob[2];
    char err2[256];
    mk(&two[0], &twob[0], "SET", key, "2");
    mk(&two[1], &twob[1], "SET", other, "2");
    assert_int_equal(rcl_run(cl, two, 2, err2, sizeof(err2)), -1);
    assert_int_not_equal(two[0].status, RCL_OK);
    assert_int_equal(two[1].status, RCL_OK);
    free_replies(two, 2);
    mk(&two[1], &twob[1], "DEL", other, NULL);
    assert_int_equal(rcl_run(cl, &two[1], 1, err2, sizeof(err2)), 0);
    free_replies(&two[1], 1);
    bool ok;
    WAIT_UNTIL(try_set(cl, key) == RCL_OK, 30000, ok);
    assert_true(ok);
    int now = rcl_primary(cl, rcl_node_of_slot(cl, slot_of(key, strlen(key))))->port;
    assert_int_not_equal(now, victim);
    fprintf(stderr, "# primary 127.0.0.1:%d killed; its slot writable on 127.0.0.1:%d after %lld ms\n", victim, now,
            (long long)(util_mono_ms() - t0));
    assert_int_equal(harness_sh("'%s/scripts/stack' start rcluster-%d >/dev/null 2>&1", harness_root(), victim - 16400),
                     0);
    static struct rcl_cmd cmd;
    static struct cmdbuf buf;
    char err[256];
    mk(&cmd, &buf, "DEL", key, NULL);
    assert_int_equal(rcl_run(cl, &cmd, 1, err, sizeof(err)), 0);
    free_replies(&cmd, 1);
    rcl_close(cl);
    c->redis.connect_timeout_ms = saved;
}

static void test_bad_seeds(void **state)
{
    (void)state;
    struct rcl *cl = NULL;
    char err[256];
    const char *bad[] = { "127.0.0.1" };
    assert_int_equal(rcl_open(&harness_conf, bad, 1, "stack", stack_pw, &cl, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "not host:port"));
    const char *standalone[] = { "127.0.0.1:16379" }; /* the plain Redis: no cluster support */
    assert_int_equal(rcl_open(&harness_conf, standalone, 1, "stack", stack_pw, &cl, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "cluster support disabled"));
    assert_null(cl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keyslot_agrees),
        cmocka_unit_test(test_batch_over_every_primary),
        cmocka_unit_test(test_run_each),
        cmocka_unit_test(test_ask_then_moved),
        cmocka_unit_test(test_lost_reply_not_resent),
        cmocka_unit_test(test_failover),
        cmocka_unit_test(test_bad_seeds),
    };
    harness_filter();
    return cmocka_run_group_tests(tests, setup, teardown);
}
