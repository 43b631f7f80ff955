/* seckill-producer on the stack's Redis Cluster (scripts/stack up --cluster,
 * config/seckill-cluster.cfg: three primaries, min_replicas_ack = 1), issue
 * #31 §1:
 * - items whose keys land on all three primaries (the nodes' CLUSTER KEYSLOT
 *   and the slot map say which) are each sold: 202 (the reservation's shard
 *   confirmed a replica holds it), the unit taken from the stock on the
 *   item's own shard and the buyer in its buyers set there;
 * - a second press of a winner is 409; the last unit gone, 410 sold out;
 * - the marks reach each item's shard (its unpublished set empties), the
 *   order index reaches its buckets' shards: the status calls by order id
 *   and by item answer "queued" with the order;
 * - orphaned reservations on every shard (reserved, never acknowledged by
 *   Kafka) are re-published by the producer's sweeper, each item's on its
 *   own shard, and stay reserved;
 * - a primary SIGKILLed: the other shards' items keep selling, the
 *   reserving link stays up, the dead shard's items are refused (503) and
 *   that is logged; once the killed node is back (a replica of the promoted
 *   one) its shard's items sell again;
 * - the producer's functions are checked on every primary: one primary
 *   without them, a running producer refuses orders (503, the gauge set)
 *   until they are loaded again, and a new one refuses to start, naming that
 *   primary;
 * - issue #57's buckets: three buckets of an item placed on the three
 *   primaries, units moved between the shards as the producer's user;
 * - a skewed sale of an item in three buckets (1,000 units; the buyers of
 *   one bucket arrive first, 600 of them, then 900 of the other two): each
 *   buyer reserves in their own bucket, a dry bucket is refilled from the
 *   reserve and, once it is empty, from the fullest other bucket; every
 *   unit is sold, one per buyer, no 410 before the last unit's 202, the
 *   transfers counted; the item's own slot refuses a buy (it only holds the
 *   reserve), and a buyer's status is read in their bucket; units added
 *   to the reserve after the sell-out are sold again, to any bucket;
 * - the same item paused (each bucket's copy of the window: 503 paused in
 *   every bucket, then sold again), and one bucket's primary SIGKILLed
 *   mid-sale: its buyers refused (503) while the other buckets sell, then
 *   sold to again after the failover, and no unit lost or made: the slots'
 *   stocks and buyers still add up to the item's units.
 * Items are loaded through rpipe as the stack's user (seckill_item_load on
 * the item's shard, and the registry), so nothing but the producer and the
 * Cluster is under test. */
#include "funclibs.h"
#include "harness.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bucket.h"
#include "keys.h"
#include "order.h"
#include "ordersig.h"
#include "rconn.h"
#include "rfunc.h"
#include "rpipe.h"
#include "sale.h"
#include "secret.h"
#include "slot.h"
#include "xfer.h"

#define PER_NODE 3 /* items per primary */
#define NODES 3
#define ITEMS (PER_NODE * NODES)

static struct secret *stack_pw;
static struct rp *rp;         /* the test's own, as the user stack */
static struct slot_map *smap; /* the Cluster's, read at setup */

static struct prod {
    struct cfg c;
    char cfgpath[128], log[128];
    int port, mport;
    pid_t pid;
} prod;

/* A connection as the user stack to map node i (no redirection followed:
 * its answers are its own). */
static redisContext *node_conn(int i)
{
    redisContext *rc = NULL;
    char err[256];
    if (rconn_open_node(&harness_conf, smap->node[i].host, smap->node[i].port, "stack", stack_pw, &rc, err,
                        sizeof(err)) != 0)
        fail_msg("%s", err);
    return rc;
}

static int read_map(void)
{
    char err[256];
    redisContext *rc = NULL;
    if (rconn_open_node(&harness_conf, "127.0.0.1", 16401, "stack", stack_pw, &rc, err, sizeof(err)) != 0) {
        fprintf(stderr, "# %s\n", err);
        return -1;
    }
    redisReply *r = redisCommand(rc, "CLUSTER SLOTS");
    int ret = r ? slot_map_read(r, smap, err, sizeof(err)) : -1;
    if (ret != 0 || smap->nnodes != NODES || slot_map_holes(smap) != 0) {
        fprintf(stderr, "# the Cluster's map: %s (%d primaries)\n", ret ? err : "holes", smap->nnodes);
        ret = -1;
    }
    freeReplyObject(r);
    redisFree(rc);
    return ret;
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
    if (!(smap = malloc(sizeof(*smap))) || read_map() != 0)
        return -1;
    if (rp_open_user(&harness_conf, "stack", stack_pw, &rp, err, sizeof(err)) != 0) {
        fprintf(stderr, "# rp_open_user: %s\n", err);
        return -1;
    }
    return 0;
}

/* Every key of the suite's prefix, on every primary (a Cluster's SCAN sees
 * one node's keys). */
static void drop_keys(void)
{
    char pattern[KEYS_MAX];
    snprintf(pattern, sizeof(pattern), "%s:*", harness_conf.redis.key_prefix);
    for (int i = 0; i < smap->nnodes; i++) {
        redisContext *rc = node_conn(i);
        char cursor[32] = "0";
        do {
            redisReply *r = harness_cmd(rc, "SCAN %s MATCH %s COUNT 1000", cursor, pattern);
            assert_int_equal(r->type, REDIS_REPLY_ARRAY);
            snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
            for (size_t k = 0; k < r->element[1]->elements; k++)
                freeReplyObject(harness_cmd(rc, "DEL %s", r->element[1]->element[k]->str));
            freeReplyObject(r);
        } while (strcmp(cursor, "0") != 0);
        redisFree(rc);
    }
}

static int teardown(void **state)
{
    (void)state;
    if (smap && stack_pw)
        drop_keys();
    rp_close(rp);
    free(smap);
    secret_free(stack_pw);
    cfg_free(&harness_conf);
    return 0;
}

/* --- the producer -------------------------------------------------------- */

static int healthz(int port)
{
    return harness_http(port, "GET", "/healthz", NULL, NULL, NULL, 0);
}

static void prod_start(void)
{
    char bin[512];
    bool ok;
    harness_cfg(&prod.c); /* config/seckill-cluster.cfg (setup) */
    harness_set_str(&prod.c.redis.key_prefix, harness_conf.redis.key_prefix);
    harness_producer_ports(&prod.c);
    prod.port = prod.c.producer.port;
    prod.mport = prod.c.producer.metrics_port;
    /* the sweeper's age: 2 x message.timeout.ms + 2 s (the producer raises
     * sweep_age_ms to it), passes after a few seconds */
    prod.c.producer.sweep_age_ms = 1000;
    prod.c.producer.sweep_interval_ms = 200;
    harness_props_set(&prod.c.kafka.producer_properties, "message.timeout.ms", "2000");
    harness_cfg_file(&prod.c, prod.cfgpath, sizeof(prod.cfgpath));
    snprintf(prod.log, sizeof(prod.log), "/tmp/seckill-test-producer-cluster-%d.log", prod.port);
    unlink(prod.log); /* a fresh port's log: an earlier run on that port left its lines */
    harness_bin("seckill-producer", bin, sizeof(bin));
    char *argv[] = { bin, "-c", prod.cfgpath, NULL };
    prod.pid = harness_spawn(argv, prod.log);
    WAIT_UNTIL(healthz(prod.port) == 200, 30000, ok);
    if (!ok)
        fail_msg("producer on port %d did not come up on the Cluster; see %s", prod.port, prod.log);
}

static void prod_stop(void)
{
    assert_int_equal(kill(prod.pid, SIGTERM), 0);
    int st = harness_wait_exit(prod.pid, 30000);
    if (st != 0)
        fail_msg("producer exit status %d after SIGTERM; see %s", st, prod.log);
    unlink(prod.cfgpath);
    cfg_free(&prod.c);
}

/* --- the items ------------------------------------------------------------ */

struct item {
    int64_t id;
    int node; /* the primary of its slot, by the map */
    char stock[KEYS_MAX], buyers[KEYS_MAX], unpub[KEYS_MAX];
};

/* The primary that serves key: the node's CLUSTER KEYSLOT (which must agree
 * with slot_of), then the map. */
static int owner_of(redisContext *rc, const char *key)
{
    redisReply *r = harness_cmd(rc, "CLUSTER KEYSLOT %s", key);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->integer, (long long)slot_of(key, strlen(key)));
    int n = smap->owner[r->integer];
    freeReplyObject(r);
    assert_true(n >= 0 && n < NODES);
    return n;
}

/* PER_NODE items on each primary, their ids from base on. */
static void pick_items(struct item *it, int64_t base)
{
    const char *prefix = harness_conf.redis.key_prefix;
    int per[NODES] = { 0 }, n = 0;
    redisContext *rc = node_conn(0);
    for (int64_t id = base + (int64_t)util_rand_below(1000000); n < ITEMS; id++) {
        char key[KEYS_MAX];
        keys_item(key, sizeof(key), prefix, id, KEYS_ITEM_STOCK);
        int o = owner_of(rc, key);
        if (per[o] == PER_NODE)
            continue;
        per[o]++;
        it[n] = (struct item){ .id = id, .node = o };
        keys_item(it[n].stock, KEYS_MAX, prefix, id, KEYS_ITEM_STOCK);
        keys_item(it[n].buyers, KEYS_MAX, prefix, id, KEYS_ITEM_BUYERS);
        keys_item(it[n].unpub, KEYS_MAX, prefix, id, KEYS_ITEM_UNPUB);
        n++;
    }
    redisFree(rc);
}

/* Load every item with stock in one batch: seckill_item_load on its
 * shard, and the registry (one key, somewhere). */
static void load_items(const struct item *it, const char *stock)
{
    const struct rfunc load = RFUNC_INIT("seckill_item_load", &funclib_ctl);
    struct rp_batch b;
    char err[256], reg[KEYS_MAX], sid[24];
    rp_batch_init(&b);
    keys_items(reg, sizeof(reg), harness_conf.redis.key_prefix);
    for (int i = 0; i < ITEMS; i++) {
        char k[KEYS_ITEM_PARTS][KEYS_MAX];
        assert_int_equal(keys_item_all(k, harness_conf.redis.key_prefix, it[i].id), 0);
        const char *argv[] = { k[KEYS_ITEM_STOCK], k[KEYS_ITEM_BUYERS], k[KEYS_ITEM_PENDING], k[KEYS_ITEM_WINDOW],
                               k[KEYS_ITEM_ORDERS], stock, "", "" };
        assert_true(rp_fcall(&b, load.name, 5, 3, argv, NULL) >= 0);
        snprintf(sid, sizeof(sid), "%" PRId64, it[i].id);
        assert_true(rp_addf(&b, reg, "SADD %s %s", reg, sid) >= 0);
    }
    if (rp_run(rp, &b, err, sizeof(err)) != 0)
        fail_msg("loading the items: %s", err);
    for (int i = 0; i < b.n; i++) {
        const redisReply *r = rp_reply(&b, i);
        if (r->type != REDIS_REPLY_INTEGER || r->integer < 0)
            fail_msg("loading the items: command %d: %s", i, r->type == REDIS_REPLY_ERROR ? r->str : "refused");
    }
    rp_batch_free(&b);
}

/* On item's own primary, without redirection: key's integer answer (cmd
 * "SISMEMBER %s %s", "GET %s" ...). Another primary answers MOVED. */
static long long on_shard(const struct item *it, int node, const char *fmt, const char *key, const char *arg)
{
    redisContext *rc = node_conn(node);
    redisReply *r = arg ? harness_cmd(rc, fmt, key, arg) : harness_cmd(rc, fmt, key);
    long long v = -1;
    if (node != it->node) {
        if (r->type != REDIS_REPLY_ERROR || strncmp(r->str, "MOVED", 5) != 0)
            fail_msg("item %" PRId64 ": node %d answered for a key of node %d", it->id, node, it->node);
    } else if (r->type == REDIS_REPLY_INTEGER) {
        v = r->integer;
    } else if (r->type == REDIS_REPLY_STRING) {
        v = atoll(r->str);
    } else {
        fail_msg("item %" PRId64 ": %s: type %d", it->id, key, r->type);
    }
    freeReplyObject(r);
    redisFree(rc);
    return v;
}

static int64_t order_id_of(const char *resp)
{
    const char *id = strstr(resp, "\"order_id\":\"");
    return id ? strtoll(id + 12, NULL, 10) : 0;
}

static bool has(const char *resp, const char *what)
{
    return strstr(resp, what) != NULL;
}

/* The status calls both ways answer "queued" with the order (no consumer
 * runs here): the order index and the orders hash reached their shards. */
static bool status_queued(const struct item *it, int64_t user, int64_t oid)
{
    char path[96], resp[2048], want[64];
    snprintf(want, sizeof(want), "\"order_id\":\"%" PRId64 "\"", oid);
    snprintf(path, sizeof(path), "/api/v1/orders/%" PRId64, oid);
    if (harness_http(prod.port, "GET", path, NULL, NULL, resp, sizeof(resp)) != 200 ||
        !has(resp, "\"status\":\"queued\"") || !has(resp, want))
        return false;
    snprintf(path, sizeof(path), "/api/v1/seckill/%" PRId64 "?user_id=%" PRId64, it->id, user);
    return harness_http(prod.port, "GET", path, NULL, NULL, resp, sizeof(resp)) == 200 &&
           has(resp, "\"status\":\"queued\"") && has(resp, want);
}

static void test_sale_on_every_primary(void **state)
{
    (void)state;
    static struct item it[ITEMS];
    int64_t oid[ITEMS][2];
    char resp[2048];
    bool ok;
    pick_items(it, 770000000);
    load_items(it, "2");
    prod_start();
    for (int i = 0; i < ITEMS; i++) {
        int64_t u = 1000 + i, v = 2000 + i, w = 3000 + i;
        if (harness_order(prod.port, u, it[i].id, resp, sizeof(resp)) != 202)
            fail_msg("item %" PRId64 " (node %d): first order: %s; see %s", it[i].id, it[i].node, resp, prod.log);
        oid[i][0] = order_id_of(resp);
        assert_true(oid[i][0] > 0);
        /* the unit and the buyer on the item's own shard, and only there */
        for (int n = 0; n < NODES; n++) {
            long long left = on_shard(&it[i], n, "GET %s", it[i].stock, NULL);
            if (n == it[i].node)
                assert_int_equal(left, 1);
        }
        char su[24];
        snprintf(su, sizeof(su), "%" PRId64, u);
        assert_int_equal(on_shard(&it[i], it[i].node, "SISMEMBER %s %s", it[i].buyers, su), 1);
        /* a winner pressing again */
        assert_int_equal(harness_order(prod.port, u, it[i].id, resp, sizeof(resp)), 409);
        assert_true(has(resp, "\"status\":\"duplicate\""));
        /* the last unit, then none */
        if (harness_order(prod.port, v, it[i].id, resp, sizeof(resp)) != 202)
            fail_msg("item %" PRId64 ": second buyer: %s", it[i].id, resp);
        oid[i][1] = order_id_of(resp);
        assert_int_equal(harness_order(prod.port, w, it[i].id, resp, sizeof(resp)), 410);
        assert_true(has(resp, "\"status\":\"sold_out\""));
        assert_int_equal(on_shard(&it[i], it[i].node, "GET %s", it[i].stock, NULL), 0);
        assert_int_equal(on_shard(&it[i], it[i].node, "SCARD %s", it[i].buyers, NULL), 2);
    }
    for (int i = 0; i < ITEMS; i++) {
        /* the marks: every accepted order published, on the item's shard */
        WAIT_UNTIL(on_shard(&it[i], it[i].node, "ZCARD %s", it[i].unpub, NULL) == 0, 10000, ok);
        if (!ok)
            fail_msg("item %" PRId64 " (node %d): its orders are still unpublished", it[i].id, it[i].node);
        assert_true(status_queued(&it[i], 1000 + i, oid[i][0]));
        assert_true(status_queued(&it[i], 2000 + i, oid[i][1]));
    }
    /* an order nobody placed, and another buyer's order */
    assert_int_equal(harness_http(prod.port, "GET", "/api/v1/orders/1", NULL, NULL, resp, sizeof(resp)), 404);
    char path[96];
    snprintf(path, sizeof(path), "/api/v1/seckill/%" PRId64 "?user_id=%d", it[0].id, 3000);
    assert_int_equal(harness_http(prod.port, "GET", path, NULL, NULL, resp, sizeof(resp)), 200);
    assert_true(has(resp, "\"status\":\"none\""));
    prod_stop();
}

/* A reservation of each item as a producer that died before Kafka answered
 * leaves it: seckill_reserve, stamped a minute ago, never marked. */
static void orphan_items(const struct item *it, int64_t *oids)
{
    const struct rfunc reserve = RFUNC_INIT("seckill_reserve", &funclib_producer);
    static char msg[ITEMS][ORDER_MSG_MAX];
    char k[KEYS_ITEM_PARTS][KEYS_MAX], user[24], oid[24], ts[24], err[256];
    struct rp_batch b;
    rp_batch_init(&b);
    for (int i = 0; i < ITEMS; i++) {
        int64_t at = util_wall_ms() - 60000;
        oids[i] = ((int64_t)1 << 50) + (int64_t)util_rand_below(1u << 30) * ITEMS + i;
        struct order o = { oids[i], 5000 + i, it[i].id, 1, at };
        assert_int_equal(osig_sign(&o), 0);
        int len = order_encode(&o, msg[i], sizeof(msg[i]));
        assert_true(len > 0);
        assert_int_equal(keys_item_all(k, harness_conf.redis.key_prefix, it[i].id), 0);
        snprintf(user, sizeof(user), "%d", 5000 + i);
        snprintf(oid, sizeof(oid), "%" PRId64, oids[i]);
        snprintf(ts, sizeof(ts), "%" PRId64, at);
        const char *argv[KEYS_ITEM_PARTS + 4];
        size_t argl[KEYS_ITEM_PARTS + 4];
        for (int p = 0; p < KEYS_ITEM_PARTS; p++)
            argv[p] = k[p];
        argv[KEYS_ITEM_PARTS] = user, argv[KEYS_ITEM_PARTS + 1] = oid;
        argv[KEYS_ITEM_PARTS + 2] = msg[i], argv[KEYS_ITEM_PARTS + 3] = ts;
        for (int p = 0; p < KEYS_ITEM_PARTS + 4; p++)
            argl[p] = strlen(argv[p]);
        argl[KEYS_ITEM_PARTS + 2] = (size_t)len;
        assert_true(rp_fcall(&b, reserve.name, KEYS_ITEM_PARTS, 4, argv, argl) >= 0);
    }
    if (rp_run(rp, &b, err, sizeof(err)) != 0)
        fail_msg("reserving: %s", err);
    for (int i = 0; i < ITEMS; i++) {
        const redisReply *r = rp_reply(&b, i);
        if (r->type != REDIS_REPLY_INTEGER || r->integer != 1)
            fail_msg("reserving item %" PRId64 ": %s", it[i].id, r->type == REDIS_REPLY_ERROR ? r->str : "refused");
    }
    rp_batch_free(&b);
}

static void test_sweeper_on_every_primary(void **state)
{
    (void)state;
    static struct item it[ITEMS];
    int64_t oids[ITEMS];
    bool ok = true;
    pick_items(it, 780000000);
    load_items(it, "2");
    orphan_items(it, oids);
    for (int i = 0; i < ITEMS; i++)
        assert_int_equal(on_shard(&it[i], it[i].node, "ZCARD %s", it[i].unpub, NULL), 1);
    prod_start();
    for (int i = 0; i < ITEMS && ok; i++) {
        WAIT_UNTIL(on_shard(&it[i], it[i].node, "ZCARD %s", it[i].unpub, NULL) == 0, 30000, ok);
        if (!ok)
            fail_msg("item %" PRId64 " (node %d): its orphan was not re-published; swept %lld; see %s", it[i].id,
                     it[i].node, (long long)sale_metric(prod.mport, "seckill_producer_swept_total"), prod.log);
    }
    assert_true(sale_metric(prod.mport, "seckill_producer_swept_total") >= ITEMS);
    /* re-published, not given back: still reserved until a consumer settles it */
    for (int i = 0; i < ITEMS; i++) {
        char key[KEYS_MAX], oid[24];
        keys_item(key, sizeof(key), harness_conf.redis.key_prefix, it[i].id, KEYS_ITEM_PENDING);
        snprintf(oid, sizeof(oid), "%" PRId64, oids[i]);
        assert_int_equal(on_shard(&it[i], it[i].node, "HEXISTS %s %s", key, oid), 1);
        assert_int_equal(on_shard(&it[i], it[i].node, "GET %s", it[i].stock, NULL), 1);
    }
    prod_stop();
}

static int order(int64_t user, int64_t item)
{
    return harness_order(prod.port, user, item, NULL, 0);
}

/* Kill the primary of it[0]'s shard: see the file's header. */
static void test_one_shard_down(void **state)
{
    (void)state;
    static struct item it[ITEMS];
    int64_t user = 7000;
    bool ok;
    pick_items(it, 790000000);
    load_items(it, "100");
    prod_start();
    for (int i = 0; i < ITEMS; i++)
        assert_int_equal(order(user++, it[i].id), 202);
    int victim = it[0].node, port = smap->node[victim].port;
    assert_int_equal(harness_sh("'%s/scripts/stack' kill rcluster-%d >/dev/null 2>&1", harness_root(), port - 16400),
                     0);
    /* the dead shard's item refused (until its replica is promoted, then
     * until that one has a replica again: min_replicas_ack = 1) */
    assert_int_equal(order(user++, it[0].id), 503);
    /* the others' sell, one request at a time: no batch of theirs touches
     * the dead shard, and the link did not go down for it */
    for (int i = 0; i < ITEMS; i++)
        if (it[i].node != victim)
            assert_int_equal(order(user++, it[i].id), 202);
    assert_int_equal(order(user++, it[0].id), 503);
    assert_int_equal(sale_metric(prod.mport, "seckill_producer_redis_up"), 1);
    assert_true(harness_file_has(prod.log, "on the shards that fail"));
    assert_false(harness_file_has(prod.log, "orders are refused (503) until it is back"));
    /* back as a replica of the promoted primary: its shard sells again */
    assert_int_equal(harness_sh("'%s/scripts/stack' start rcluster-%d >/dev/null 2>&1", harness_root(), port - 16400),
                     0);
    WAIT_UNTIL(order(user++, it[0].id) == 202, 60000, ok);
    if (!ok)
        fail_msg("item %" PRId64 ": its shard did not sell again after the failover; see %s", it[0].id, prod.log);
    for (int i = 0; i < ITEMS; i++)
        assert_int_equal(order(user++, it[i].id), 202);
    prod_stop();
    /* the Cluster whole again, and its new map for the cleanup */
    assert_int_equal(harness_sh("'%s/scripts/stack' up --cluster >/dev/null 2>&1", harness_root()), 0);
    assert_int_equal(read_map(), 0);
}

/* The producer's library on map node i: deleted (FUNCTION DELETE, which
 * its replica follows), or loaded again. */
static void functions_on(int i, bool there)
{
    redisContext *rc = node_conn(i);
    char err[512];
    int was;
    if (there) {
        if (rfunc_load(rc, &funclib_producer, &was, err, sizeof(err)) != 0)
            fail_msg("loading the functions again: %s", err);
    } else {
        redisReply *r = harness_cmd(rc, "FUNCTION DELETE %s", funclib_producer.name);
        assert_int_equal(r->type, REDIS_REPLY_STATUS);
        freeReplyObject(r);
    }
    redisFree(rc);
}

static void test_functions_on_every_primary(void **state)
{
    (void)state;
    static struct item it[ITEMS];
    int64_t user = 8000;
    bool ok;
    pick_items(it, 800000000);
    load_items(it, "100");
    prod_start();
    int victim = it[ITEMS - 1].node;
    assert_int_equal(order(user++, it[ITEMS - 1].id), 202);
    functions_on(victim, false);
    /* a running producer: its next call there finds them missing */
    assert_int_equal(order(user++, it[ITEMS - 1].id), 503);
    WAIT_UNTIL(sale_metric(prod.mport, "seckill_producer_redis_functions_missing") == 1, 10000, ok);
    assert_true(ok);
    functions_on(victim, true);
    WAIT_UNTIL(order(user++, it[ITEMS - 1].id) == 202, 30000, ok);
    assert_true(ok);
    assert_int_equal(sale_metric(prod.mport, "seckill_producer_redis_functions_missing"), 0);
    prod_stop();
    /* a new producer: no start while one primary lacks them */
    functions_on(victim, false);
    char bin[512], node[64];
    harness_cfg(&prod.c);
    harness_set_str(&prod.c.redis.key_prefix, harness_conf.redis.key_prefix);
    harness_producer_ports(&prod.c);
    harness_cfg_file(&prod.c, prod.cfgpath, sizeof(prod.cfgpath));
    harness_bin("seckill-producer", bin, sizeof(bin));
    snprintf(prod.log, sizeof(prod.log), "/tmp/seckill-test-producer-cluster-%d-nostart.log", prod.c.producer.port);
    unlink(prod.log); /* a fresh port's log: an earlier run on that port left its lines */
    char *argv[] = { bin, "-c", prod.cfgpath, NULL };
    int st = harness_wait_exit(harness_spawn(argv, prod.log), 30000);
    functions_on(victim, true);
    unlink(prod.cfgpath);
    cfg_free(&prod.c);
    if (st == 0)
        fail_msg("the producer started without its functions on one primary; see %s", prod.log);
    snprintf(node, sizeof(node), "%s:%d", smap->node[victim].host, smap->node[victim].port);
    assert_true(harness_file_has(prod.log, "refusing to start"));
    assert_true(harness_file_has(prod.log, node));
}


/* A key's value asked of the primary the test's own map names, no
 * redirection followed: only the right shard has it. */
static long long stock_on_own_shard(int64_t item, int salt)
{
    char k[KEYS_MAX];
    assert_true(keys_item_at(k, sizeof(k), harness_conf.redis.key_prefix, item, salt, KEYS_ITEM_STOCK) > 0);
    redisContext *rc = node_conn(smap->owner[slot_of(k, strlen(k))]);
    redisReply *r = harness_cmd(rc, "GET %s", k);
    long long v = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : -1;
    freeReplyObject(r);
    redisFree(rc);
    return v;
}

static void set_stock(const char *k, int v)
{
    char err[256];
    enum rp_status st;
    redisReply *r = rp_callf(rp, k, &st, err, sizeof(err), "SET %s %d", k, v);
    if (!r || r->type != REDIS_REPLY_STATUS)
        fail_msg("SET %s: %s", k, r ? r->str : err);
    freeReplyObject(r);
}

/* Issue #57's buckets: an item's three buckets placed on the three primaries
 * (by the producer's own view of the map), and units moved between shards
 * by the producer's ACL user, whole, half (the giving half alone) and
 * finished, with the sum of the stocks and the units in flight unmoved. */
static void test_buckets_on_every_primary(void **state)
{
    (void)state;
    const char *pfx = harness_conf.redis.key_prefix;
    int64_t item = 570000001, moved = 0;
    int salts[BUCKET_MAX], seen[NODES] = { 0 };
    char err[512], k[KEYS_MAX];
    struct rp *pr = NULL;
    struct xfer_tally t;
    assert_int_equal(rp_nodes(rp), NODES);
    assert_int_equal(bucket_place(pfx, item, NODES, rp_nodes(rp), rp_node_fn, rp, salts), 0);
    assert_int_equal(bucket_spread(pfx, item, NODES, salts, rp_node_fn, rp), NODES);
    for (int b = 0; b < NODES; b++) {
        keys_item_at(k, sizeof(k), pfx, item, salts[b], KEYS_ITEM_STOCK);
        seen[smap->owner[slot_of(k, strlen(k))]]++;
    }
    for (int n = 0; n < NODES; n++)
        assert_int_equal(seen[n], 1); /* the test's own map agrees: one bucket per primary */

    if (rp_open(&harness_conf, CFG_ROLE_PRODUCER, &pr, err, sizeof(err)) != 0)
        fail_msg("rp_open as the producer: %s", err);
    keys_item(k, sizeof(k), pfx, item, KEYS_ITEM_STOCK);
    set_stock(k, 9);
    for (int b = 0; b < NODES; b++) {
        keys_item_at(k, sizeof(k), pfx, item, salts[b], KEYS_ITEM_STOCK);
        set_stock(k, 0);
    }
    for (int b = 0; b < NODES; b++) {
        struct xfer x = { .item = item, .from = BUCKET_HOME, .to = salts[b], .want = 3, .keep = 0 };
        assert_int_equal(xfer_new_id(x.id), 0);
        if (xfer_move(pr, pfx, &x, &moved, err, sizeof(err)) != 0)
            fail_msg("xfer_move: %s", err);
        assert_int_equal(moved, 3);
        assert_int_equal(stock_on_own_shard(item, salts[b]), 3);
    }
    assert_int_equal(stock_on_own_shard(item, BUCKET_HOME), 0);
    /* Bucket 0 gives 2 to bucket 1, the giving half only (a crash between). */
    char id[XFER_ID_MAX], to[16], xout[KEYS_MAX], st0[KEYS_MAX];
    assert_int_equal(xfer_new_id(id), 0);
    snprintf(to, sizeof(to), "%d", salts[1]);
    keys_item_at(st0, sizeof(st0), pfx, item, salts[0], KEYS_ITEM_STOCK);
    keys_item_at(xout, sizeof(xout), pfx, item, salts[0], KEYS_ITEM_XOUT);
    const char *argv[] = { st0, xout, id, to, "2", "0" };
    struct rp_batch b;
    rp_batch_init(&b);
    assert_true(rp_fcall(&b, "seckill_xfer_out", 2, 4, argv, NULL) >= 0);
    assert_int_equal(rp_run(pr, &b, err, sizeof(err)), 0);
    assert_int_equal(rp_reply(&b, 0)->integer, 2);
    rp_batch_free(&b);
    assert_int_equal(xfer_finish(pr, pfx, item, salts[0], true, &t, err, sizeof(err)), 0);
    assert_int_equal(t.in_flight, 2);
    assert_int_equal(t.finished, 1);
    assert_int_equal(stock_on_own_shard(item, salts[0]), 1);
    assert_int_equal(stock_on_own_shard(item, salts[1]), 5);
    assert_int_equal(stock_on_own_shard(item, salts[0]) + stock_on_own_shard(item, salts[1]) +
                         stock_on_own_shard(item, salts[2]),
                     9);
    rp_close(pr);
}

/* Load a bucketed item as seckillctl does (ctl/itembk.h): the reserve holds
 * every unit, each bucket is loaded empty, the item's window names them. */
static void load_bucketed(int64_t item, int k, const int salts[], const char *units)
{
    const struct rfunc load = RFUNC_INIT("seckill_item_load", &funclib_ctl);
    char err[256], reg[KEYS_MAX], sid[24], win[KEYS_MAX], names[64];
    struct rp_batch b;
    /* A read of each slot first, its answer ignored: a connection an earlier
     * test's restart broke fails it, and the next run opens a new one. */
    rp_batch_init(&b);
    for (int i = -1; i < k; i++) {
        char key[KEYS_MAX];
        keys_item_at(key, sizeof(key), harness_conf.redis.key_prefix, item, i < 0 ? BUCKET_HOME : salts[i],
                     KEYS_ITEM_STOCK);
        assert_true(rp_addf(&b, key, "EXISTS %s", key) >= 0);
    }
    (void)rp_run(rp, &b, err, sizeof(err));
    rp_batch_reset(&b);
    for (int i = -1; i < k; i++) {
        char kk[KEYS_ITEM_PARTS][KEYS_MAX];
        assert_int_equal(keys_item_all_at(kk, harness_conf.redis.key_prefix, item, i < 0 ? BUCKET_HOME : salts[i]), 0);
        const char *argv[] = { kk[KEYS_ITEM_STOCK], kk[KEYS_ITEM_BUYERS], kk[KEYS_ITEM_PENDING],
                               kk[KEYS_ITEM_WINDOW], kk[KEYS_ITEM_ORDERS], i < 0 ? units : "0", "", "" };
        assert_true(rp_fcall(&b, load.name, 5, 3, argv, NULL) >= 0);
    }
    keys_items(reg, sizeof(reg), harness_conf.redis.key_prefix);
    snprintf(sid, sizeof(sid), "%" PRId64, item);
    assert_true(rp_addf(&b, reg, "SADD %s %s", reg, sid) >= 0);
    keys_item(win, sizeof(win), harness_conf.redis.key_prefix, item, KEYS_ITEM_WINDOW);
    assert_true(bucket_format(names, sizeof(names), salts, k) > 0);
    assert_true(rp_addf(&b, win, "HSET %s %s %s", win, KEYS_WINDOW_BUCKETS, names) >= 0);
    if (rp_run(rp, &b, err, sizeof(err)) != 0)
        fail_msg("loading the bucketed item: %s", err);
    for (int i = 0; i < b.n; i++)
        if (rp_reply(&b, i)->type == REDIS_REPLY_ERROR)
            fail_msg("loading the bucketed item: %s", rp_reply(&b, i)->str);
    rp_batch_free(&b);
}

/* A key's integer (GET, SCARD) through the test's own connection. */
static long long key_int(const char *fmt, const char *key)
{
    char err[256];
    enum rp_status st;
    redisReply *r = rp_callf(rp, key, &st, err, sizeof(err), fmt, key);
    long long v = !r ? -1 : r->type == REDIS_REPLY_INTEGER ? r->integer
                          : r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : -1;
    freeReplyObject(r);
    return v;
}

/* Buy as each user of [from, from+n) whose bucket is in `want` (a bit per
 * bucket), in turn: the answers counted into got[] (202, 410, other) and
 * the first 410 after how many 202s (*first_410_after, if not yet set). */
static int64_t buy_bucket_users(int64_t item, int64_t from, int n, unsigned want, int k, long got[3],
                                long *accepted, long *first_410_after, int64_t *last_oid)
{
    char resp[1024];
    int64_t u = from;
    for (int done = 0; done < n; u++) {
        if (!(want & (1u << bucket_of(u, k))))
            continue;
        done++;
        int st = harness_order(prod.port, u, item, resp, sizeof(resp));
        if (st == 202) {
            got[0]++;
            (*accepted)++;
            *last_oid = order_id_of(resp);
        } else if (st == 410) {
            got[1]++;
            if (*first_410_after < 0)
                *first_410_after = *accepted;
        } else {
            got[2]++;
            print_message("# user %" PRId64 ": %d %s\n", u, st, resp);
        }
    }
    return u;
}

/* The reserve's transfers to bucket `to` (its :xout records, "SALT:UNITS"):
 * a bucket that runs dry again soon after a refill asks twice as many as
 * that one did (producer/reserve.c), so 600 buys one after another cost
 * fewer refills than the 600 / 64 of a fixed size, and one of them moved
 * more than the first 64. */
static void refills_grew(int64_t item, int to)
{
    char key[KEYS_MAX], err[256];
    enum rp_status st;
    long n = 0, most = 0;
    keys_item(key, sizeof(key), harness_conf.redis.key_prefix, item, KEYS_ITEM_XOUT);
    redisReply *r = rp_callf(rp, key, &st, err, sizeof(err), "HVALS %s", key);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    for (size_t i = 0; i < r->elements; i++) {
        int salt;
        long units;
        if (sscanf(r->element[i]->str, "%d:%ld", &salt, &units) == 2 && salt == to) {
            n++;
            most = units > most ? units : most;
        }
    }
    freeReplyObject(r);
    print_message("# bucket %d: %ld refills from the reserve, the largest %ld units\n", to, n, most);
    assert_true(n >= 2 && n < 600 / 64);
    assert_true(most > 64);
}

static void test_skewed_bucket_sale(void **state)
{
    (void)state;
    const char *pfx = harness_conf.redis.key_prefix;
    const int k = NODES;
    int64_t item = 570000002 + (int64_t)util_rand_below(1000000), user0 = 9100000, last_oid = 0;
    int salts[BUCKET_MAX];
    long first[3] = { 0 }, then[3] = { 0 }, accepted = 0, first_410_after = -1, buyers = 0;
    char k0[KEYS_ITEM_PARTS][KEYS_MAX];
    assert_int_equal(bucket_place(pfx, item, k, rp_nodes(rp), rp_node_fn, rp, salts), 0);
    load_bucketed(item, k, salts, "1000");
    prod_start();
    /* The buyers of bucket 0 first: all of them are sold to, from the reserve. */
    int64_t next = buy_bucket_users(item, user0, 600, 1u << 0, k, first, &accepted, &first_410_after, &last_oid);
    assert_int_equal(first[0], 600);
    assert_int_equal(first[1] + first[2], 0);
    refills_grew(item, salts[0]);
    int64_t u0 = user0;
    while (bucket_of(u0, k) != 0)
        u0++;
    /* Then the other two buckets' buyers: 400 units left, in the reserve and
     * in bucket 0 (the rest of its last refill): every one is sold before
     * the first 410. */
    (void)buy_bucket_users(item, next, 900, (1u << 1) | (1u << 2), k, then, &accepted, &first_410_after,
                           &last_oid);
    assert_int_equal(then[0], 400);
    assert_int_equal(then[1], 500);
    assert_int_equal(then[2], 0);
    assert_int_equal(first_410_after, 1000);
    for (int b = -1; b < k; b++) {
        char key[KEYS_MAX];
        int salt = b < 0 ? BUCKET_HOME : salts[b];
        assert_int_equal(stock_on_own_shard(item, salt), 0);
        keys_item_at(key, sizeof(key), pfx, item, salt, KEYS_ITEM_BUYERS);
        long long n = key_int("SCARD %s", key);
        if (b < 0)
            assert_int_equal(n, 0); /* nobody bought from the reserve */
        buyers += n;
    }
    assert_int_equal(buyers, 1000);
    assert_true(sale_metric(prod.mport, "seckill_producer_bucket_transfers_total{from=\"reserve\"}") >= 2);
    assert_true(sale_metric(prod.mport, "seckill_producer_bucket_transfers_total{from=\"bucket\"}") >= 1);
    assert_true(sale_metric(prod.mport, "seckill_producer_bucket_transfer_units_total") >= 1000);
    /* Sold out in every slot: the producer answers the crowd itself once it
     * has copied every bucket's buyers (soldout.h), and a winner still hears
     * 409, never 410. */
    char resp[1024], path[96];
    bool known;
    WAIT_UNTIL(sale_metric(prod.mport, "seckill_producer_sold_out_items") == 1, 10000, known);
    assert_true(known);
    long long local0 = sale_metric(prod.mport, "seckill_producer_sold_out_local_total");
    for (int64_t u = user0 + 50000; u < user0 + 50030; u++)
        assert_int_equal(harness_order(prod.port, u, item, resp, sizeof(resp)), 410);
    assert_int_equal(sale_metric(prod.mport, "seckill_producer_sold_out_local_total") - local0, 30);
    /* A winner of bucket 0 again: 409; their status is read in their bucket. */
    assert_int_equal(harness_order(prod.port, u0, item, resp, sizeof(resp)), 409);
    for (int b = 1; b < k; b++) {
        int64_t w = next; /* the first buyers of buckets 1 and 2 each bought */
        while (bucket_of(w, k) != b)
            w++;
        assert_int_equal(harness_order(prod.port, w, item, resp, sizeof(resp)), 409);
    }
    snprintf(path, sizeof(path), "/api/v1/seckill/%" PRId64 "?user_id=%" PRId64, item, u0);
    assert_int_equal(harness_http(prod.port, "GET", path, NULL, NULL, resp, sizeof(resp)), 200);
    assert_true(has(resp, "\"status\":\"queued\""));
    snprintf(path, sizeof(path), "/api/v1/orders/%" PRId64, last_oid);
    assert_int_equal(harness_http(prod.port, "GET", path, NULL, NULL, resp, sizeof(resp)), 200);
    assert_true(has(resp, "\"status\":\"queued\""));
    /* Units added to the reserve once all is sold (seckillctl item add-stock's
     * Redis half): sold again, to any bucket's buyers, once the producer's
     * sold-out memory of the item lapses (producer.soldout_refresh_ms). */
    char home[KEYS_MAX], why[256];
    enum rp_status rst;
    keys_item(home, sizeof(home), pfx, item, KEYS_ITEM_STOCK);
    freeReplyObject(rp_callf(rp, home, &rst, why, sizeof(why), "INCRBY %s 5", home));
    long again = 0, tries = 0;
    for (int64_t u = user0 + 100000; again < 5 && tries < 2000; u++, tries++) {
        int st = harness_order(prod.port, u, item, resp, sizeof(resp));
        again += st == 202;
        if (st != 202 && st != 410)
            fail_msg("user %" PRId64 ": %d %s", u, st, resp);
        if (st == 410)
            util_sleep_ms(5); /* (a buyer who comes again a moment later) */
    }
    assert_int_equal(again, 5);
    assert_int_equal(harness_order(prod.port, user0 + 200000, item, resp, sizeof(resp)) == 410 ||
                         harness_order(prod.port, user0 + 200001, item, resp, sizeof(resp)) == 410,
                     1);
    assert_int_equal(stock_on_own_shard(item, BUCKET_HOME), 0);
    /* The item's own slot sells nothing: a buy sent there is refused (-11). */
    assert_int_equal(keys_item_all(k0, pfx, item), 0);
    {
        const char *argv[] = { k0[KEYS_ITEM_STOCK], k0[KEYS_ITEM_BUYERS], k0[KEYS_ITEM_PENDING],
                               k0[KEYS_ITEM_UNPUB], k0[KEYS_ITEM_WINDOW], k0[KEYS_ITEM_ORDERS],
                               "1", "1", "{}", "1" };
        struct rp_batch b;
        char err[256];
        rp_batch_init(&b);
        assert_true(rp_fcall(&b, "seckill_reserve", 6, 4, argv, NULL) >= 0);
        assert_int_equal(rp_run(rp, &b, err, sizeof(err)), 0);
        assert_int_equal(rp_reply(&b, 0)->type, REDIS_REPLY_INTEGER);
        assert_int_equal(rp_reply(&b, 0)->integer, -11);
        rp_batch_free(&b);
    }
    prod_stop();
}

/* The first user from `from` on whose bucket of k is b. */
static int64_t user_in(int64_t from, int b, int k)
{
    while (bucket_of(from, k) != b)
        from++;
    return from;
}

/* Each bucket's window paused ("1") or not (NULL), as seckillctl's copy
 * leaves it (itembk_copy_window). */
static void pause_buckets(int64_t item, int k, const int salts[], const char *paused)
{
    for (int b = 0; b < k; b++) {
        char key[KEYS_MAX], err[256];
        enum rp_status st;
        keys_item_at(key, sizeof(key), harness_conf.redis.key_prefix, item, salts[b], KEYS_ITEM_WINDOW);
        redisReply *r = paused ? rp_callf(rp, key, &st, err, sizeof(err), "HSET %s paused %s", key, paused)
                               : rp_callf(rp, key, &st, err, sizeof(err), "HDEL %s paused", key);
        if (!r || r->type != REDIS_REPLY_INTEGER)
            fail_msg("pausing bucket %d: %s", b, r ? r->str : err);
        freeReplyObject(r);
    }
}

/* The units of the item's slots: stocks plus buyers (each holds one, no
 * consumer runs here), over its own slot and its buckets. */
static long long units_held(int64_t item, int k, const int salts[])
{
    long long n = 0;
    for (int b = -1; b < k; b++) {
        char key[KEYS_MAX];
        int salt = b < 0 ? BUCKET_HOME : salts[b];
        keys_item_at(key, sizeof(key), harness_conf.redis.key_prefix, item, salt, KEYS_ITEM_BUYERS);
        /* (asked of the primary the map read after the failover names: the
         * test's own connection may still know the dead one) */
        redisContext *rc = node_conn(smap->owner[slot_of(key, strlen(key))]);
        redisReply *r = harness_cmd(rc, "SCARD %s", key);
        long long st = stock_on_own_shard(item, salt), by = r->type == REDIS_REPLY_INTEGER ? r->integer : -1000;
        freeReplyObject(r);
        redisFree(rc);
        print_message("# slot %d (salt %d): stock %lld, buyers %lld\n", b, salt, st, by);
        n += st + by;
    }
    return n;
}

static void test_bucket_paused_and_shard_down(void **state)
{
    (void)state;
    const char *pfx = harness_conf.redis.key_prefix;
    const int k = NODES;
    int64_t item = 571000003 + (int64_t)util_rand_below(1000000), u = 9300000;
    int salts[BUCKET_MAX], victim = -1;
    char resp[1024], key[KEYS_MAX];
    bool ok;
    assert_int_equal(bucket_place(pfx, item, k, rp_nodes(rp), rp_node_fn, rp, salts), 0);
    load_bucketed(item, k, salts, "300");
    prod_start();
    for (int b = 0; b < k; b++)
        assert_int_equal(order(u = user_in(u + 1, b, k), item), 202);
    /* paused: every bucket's buyers told so (after the holder's 409) */
    pause_buckets(item, k, salts, "1");
    for (int b = 0; b < k; b++) {
        assert_int_equal(harness_order(prod.port, u = user_in(u + 1, b, k), item, resp, sizeof(resp)), 503);
        assert_non_null(strstr(resp, "paused"));
    }
    pause_buckets(item, k, salts, NULL);
    /* a bucket on another primary than the reserve's: its buyers' shard goes */
    keys_item(key, sizeof(key), pfx, item, KEYS_ITEM_STOCK);
    int home = smap->owner[slot_of(key, strlen(key))];
    for (int b = 0; b < k && victim < 0; b++) {
        keys_item_at(key, sizeof(key), pfx, item, salts[b], KEYS_ITEM_STOCK);
        if (smap->owner[slot_of(key, strlen(key))] != home)
            victim = b;
    }
    assert_true(victim >= 0);
    keys_item_at(key, sizeof(key), pfx, item, salts[victim], KEYS_ITEM_STOCK);
    int port = smap->node[smap->owner[slot_of(key, strlen(key))]].port;
    assert_int_equal(harness_sh("'%s/scripts/stack' kill rcluster-%d >/dev/null 2>&1", harness_root(), port - 16400),
                     0);
    assert_int_equal(order(u = user_in(u + 1, victim, k), item), 503);
    for (int b = 0; b < k; b++)
        if (b != victim)
            assert_int_equal(order(u = user_in(u + 1, b, k), item), 202);
    assert_int_equal(harness_sh("'%s/scripts/stack' start rcluster-%d >/dev/null 2>&1", harness_root(), port - 16400),
                     0);
    /* (a new buyer each time: a reservation the promoted primary's missing
     * replica did not confirm is kept for the sweeper, and its buyer holds it) */
    WAIT_UNTIL(order(u = user_in(u + 1, victim, k), item) == 202, 60000, ok);
    if (!ok)
        fail_msg("item %" PRId64 ": bucket %d did not sell again after the failover; see %s", item, victim, prod.log);
    prod_stop();
    assert_int_equal(harness_sh("'%s/scripts/stack' up --cluster >/dev/null 2>&1", harness_root()), 0);
    assert_int_equal(read_map(), 0);
    assert_int_equal(units_held(item, k, salts), 300);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buckets_on_every_primary),
        cmocka_unit_test(test_skewed_bucket_sale),
        cmocka_unit_test(test_sale_on_every_primary),
        cmocka_unit_test(test_sweeper_on_every_primary),
        cmocka_unit_test(test_functions_on_every_primary),
        cmocka_unit_test(test_one_shard_down),
        cmocka_unit_test(test_bucket_paused_and_shard_down),
    };
    harness_filter();
    return cmocka_run_group_tests(tests, setup, teardown);
}
