/* Payments (issue #44), end to end against the stack: the shop's payment
 * service publishes payments on the payments topic as its own Kafka user
 * ("payment", which may write that topic and nothing else), and a running
 * consumer moves each order from pending_payment to paid, exactly once,
 * under the user's lock and fence:
 *  - a payment pays its order in PostgreSQL and marks it 'p' in Redis; the
 *    same payment again changes nothing (a replay), another payment of a
 *    paid order is recorded late (paid_other);
 *  - a payment for an expired order is recorded late, and the order and the
 *    stock are left alone;
 *  - payments published right at their orders' pay_by while the expiry runs:
 *    each order ends either paid or expired with a late payment, and no unit
 *    of a paid order ever goes back;
 *  - malformed payments, and one whose order never comes, are dead-lettered
 *    with their reasons; a payment published before its order waits for it;
 *  - a burst of payments (applied in batches) pays each order once, by its
 *    own payment; its replay, with second payments among it, changes no
 *    order and records each second payment late once.
 *
 * Orders are published signed on the orders topic (as a producer does) and
 * persisted by one consumer started for the suite, running as a Redis ACL
 * user of this run with the rules scripts/stack.d/redis.sh gives the
 * consumer. The suite has its own orders, dead-letter and payments topics
 * (sktest.payments.*: the payment user's scratch topics on the dev stack),
 * group, key prefix and items; each test its own item and users, and reads
 * the consumer's counters as differences. */
#include "harness.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "keys.h"
#include "life.h"
#include "order.h"
#include "ordersig.h"
#include "paymsg.h"
#include "keyring.h"
#include "paysig.h"
#include "sale.h"

#define KAFKA_WAIT_MS 20000

/* The suite's consumer and its topics. */
static struct {
    struct cfg c;
    char cfgpath[128], clog[192], pwfile[128], user[64], password[40];
    char topic[96], dlq[112], payments[96];
    int cport;
    pid_t cons;
    rd_kafka_t *orders, *pay; /* producers: as admin (orders), as payment */
    int64_t items[32];
    int nitems;
    int64_t user_lo, user_hi; /* every user of the run */
    int64_t block;            /* the run's order ids: a block taken as a producer takes one */
} S;

/* --- fixtures ------------------------------------------------------------------ */

/* An ACL user with the consumer's rules as the stack writes them (ACL
 * SETUSER puts the selectors that come apart at their spaces together). */
static void acl_user_create(void)
{
    char cmd[1024], rules[8192], pw[48], rnd[17], *save = NULL;
    const char *argv[512];
    int n = 0;
    snprintf(cmd, sizeof(cmd),
             "bash -c 'STATE=/nonexistent; . \"$0/scripts/stack.d/redis.sh\" && redis_acl_rules consumer \"$1\"' "
             "'%s' '%s'",
             harness_root(), harness_conf.redis.key_prefix);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t len = fread(rules, 1, sizeof(rules) - 1, f);
    rules[len] = '\0';
    assert_int_equal(pclose(f), 0);
    assert_int_equal(util_random_hex(rnd, 8), 0);
    snprintf(S.user, sizeof(S.user), "sktest-payments-%d", (int)getpid());
    snprintf(S.password, sizeof(S.password), "c-%s", rnd);
    snprintf(pw, sizeof(pw), ">%s", S.password);
    argv[n++] = "ACL", argv[n++] = "SETUSER", argv[n++] = S.user, argv[n++] = "reset", argv[n++] = "on";
    argv[n++] = pw;
    for (char *t = strtok_r(rules, " \n", &save); t && n < 510; t = strtok_r(NULL, " \n", &save))
        argv[n++] = t;
    redisContext *rc = harness_redis(&harness_conf);
    redisReply *r = redisCommandArgv(rc, n, argv, NULL);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("ACL SETUSER %s: %s", S.user, r->str);
    freeReplyObject(r);
    redisFree(rc);
}

static rd_kafka_t *producer_as(const char *user)
{
    return life_producer(&harness_conf, user, "0");
}

/* The consumer's configuration for this run, written to S.cfgpath. */
static void consumer_cfg(void)
{
    char rnd[9];
    assert_int_equal(util_random_hex(rnd, 4), 0);
    snprintf(S.pwfile, sizeof(S.pwfile), "/tmp/sktest-payments-pw-%d-%s", (int)getpid(), rnd);
    harness_write_secret(S.pwfile, S.password);
    harness_cfg(&S.c);
    harness_set_str(&S.c.redis.key_prefix, harness_conf.redis.key_prefix);
    harness_set_str(&S.c.redis.user[CFG_ROLE_CONSUMER], S.user);
    harness_set_str(&S.c.redis.password_file[CFG_ROLE_CONSUMER], S.pwfile);
    snprintf(S.topic, sizeof(S.topic), "sktest.paylife.%d.%s", (int)getpid(), rnd);
    snprintf(S.dlq, sizeof(S.dlq), "%s.dlq", S.topic);
    snprintf(S.payments, sizeof(S.payments), "sktest.payments.%d.%s", (int)getpid(), rnd);
    harness_set_str(&S.c.kafka.topic, S.topic);
    harness_set_str(&S.c.kafka.dlq_topic, S.dlq);
    harness_set_str(&S.c.kafka.payments_topic, S.payments);
    free(S.c.consumer.group_id);
    assert_true(asprintf(&S.c.consumer.group_id, "sktest-payments-%d-%s", (int)getpid(), rnd) > 0);
    S.c.consumer.workers = 2;
    S.c.consumer.expire_interval_ms = 100;
    S.c.consumer.return_backoff_cap_ms = 300;
    S.c.consumer.payment_wait_ms = 4000;
    S.c.consumer.payment_wait_max = 50000;
    S.c.consumer.metrics_port = S.cport = harness_free_port();
    harness_cfg_file(&S.c, S.cfgpath, sizeof(S.cfgpath));
    snprintf(S.clog, sizeof(S.clog), "%s.consumer.log", S.cfgpath);
}

static int setup(void **state)
{
    char bin[512];
    bool ok;
    harness_setup(state);
    if (life_load_return() != 0)
        return -1;
    S.user_lo = 7000000 + (int64_t)util_rand_below(1000000) * 4096;
    S.user_hi = S.user_lo + 4095;
    /* Order ids of a block really taken: the consumer refuses a payment
     * for an id no producer could have issued (above the highest block). */
    S.block = life_pg_int("INSERT INTO order_id_blocks (host, pid) VALUES ('sktest-payments', $1::integer) "
                          "RETURNING block",
                          (int64_t)getpid());
    if (S.block <= 0)
        return -1;
    acl_user_create();
    consumer_cfg();
    if (harness_topic_create(&S.c, S.topic, 4) != 0 || harness_topic_create(&S.c, S.dlq, 1) != 0 ||
        harness_topic_create(&S.c, S.payments, 4) != 0)
        return -1;
    S.orders = producer_as("admin");
    S.pay = producer_as("payment");
    harness_bin("seckill-consumer", bin, sizeof(bin));
    char *argv[] = { bin, "-c", S.cfgpath, NULL };
    S.cons = harness_spawn(argv, S.clog);
    /* Both of its consumers: the orders' and the payments' (4 partitions each). */
    WAIT_UNTIL(sale_metric(S.cport, "seckill_consumer_assigned_partitions") == 4 &&
                   sale_metric(S.cport, "seckill_consumer_payments_assigned_partitions") == 4,
               60000, ok);
    if (!ok) {
        fprintf(stderr, "# the consumer did not come up; see %s\n", S.clog);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    redisContext *rc = NULL;
    char err[256];
    int st = 0;
    if (S.cons > 0) {
        kill(S.cons, SIGTERM);
        st = harness_wait_exit(S.cons, 30000);
        if (st != 0)
            fprintf(stderr, "# the consumer exited %d; see %s\n", st, S.clog);
    }
    if (S.orders)
        rd_kafka_destroy(S.orders);
    if (S.pay)
        rd_kafka_destroy(S.pay);
    if (harness_redis_open(&harness_conf, &rc, err, sizeof(err)) == 0) {
        freeReplyObject(redisCommand(rc, "ACL DELUSER %s", S.user));
        redisFree(rc);
    }
    harness_pg_try(&harness_conf, "DELETE FROM late_payments WHERE user_id BETWEEN $1 AND $2", S.user_lo,
                   S.user_hi);
    for (int i = 0; i < S.nitems; i++)
        life_pg_drop(S.items[i]);
    harness_topic_delete(&S.c, S.topic);
    harness_topic_delete(&S.c, S.dlq);
    harness_topic_delete(&S.c, S.payments);
    unlink(S.pwfile);
    if (st == 0 && !getenv("SECKILL_TEST_KEEP_LOGS")) {
        unlink(S.cfgpath);
        unlink(S.clog);
    }
    cfg_free(&S.c);
    harness_teardown(state);
    return st == 0 ? 0 : -1;
}

/* --- publishing ---------------------------------------------------------------- */

static void flush(rd_kafka_t *rk)
{
    assert_int_equal(rd_kafka_flush(rk, KAFKA_WAIT_MS), RD_KAFKA_RESP_ERR_NO_ERROR);
}

/* An order, signed as a producer signs it, on the orders topic; first its
 * buyer's fields in the item's orders hash, as the producer's reservation
 * writes them (the status calls' "queued"), so that the consumer's marks
 * find the order as they would in a sale. */
static void publish_order(int64_t order, int64_t user, int64_t item)
{
    struct order o = { order, user, item, 1, util_wall_ms() };
    char buf[ORDER_MSG_MAX], key[ORDER_ID_STR_MAX], k[KEYS_MAX], of[32], uf[32], ov[64], ov2[24];
    assert_true(keys_item(k, sizeof(k), harness_conf.redis.key_prefix, item, KEYS_ITEM_ORDERS) > 0);
    snprintf(of, sizeof(of), "o:%" PRId64, order);
    snprintf(uf, sizeof(uf), "u:%" PRId64, user);
    snprintf(ov, sizeof(ov), "%" PRId64 "|q|%" PRId64 "||", user, o.reserved_at_ms);
    snprintf(ov2, sizeof(ov2), "%" PRId64, order);
    redisContext *rc = harness_redis(&harness_conf);
    freeReplyObject(harness_cmd(rc, "HSET %s %s %s %s %s", k, of, ov, uf, ov2));
    redisFree(rc);
    assert_int_equal(osig_sign(&o), 0);
    int n = order_encode(&o, buf, sizeof(buf));
    assert_true(n > 0);
    snprintf(key, sizeof(key), "%" PRId64, user);
    life_produce(S.orders, S.topic, key, buf, (size_t)n);
}

static void publish_payment(int64_t order, int64_t user, int64_t paid_at_ms, const char *ref)
{
    life_payment(S.pay, S.payments, order, user, paid_at_ms, ref);
}

/* --- what the stores and the consumer say ----------------------------------------- */

static int64_t late_rows(int64_t order, const char *then)
{
    char sql[160];
    snprintf(sql, sizeof(sql), "SELECT count(*) FROM late_payments WHERE order_id = $1 AND status_then = '%s'",
             then);
    return life_pg_int(sql, order);
}

static int64_t metric(const char *name)
{
    return sale_metric(S.cport, name);
}

/* The order's state in the item's orders hash ("user|state|rsv|settled|detail"). */
static void redis_state(int64_t item, int64_t order, char *out, size_t len)
{
    char k[KEYS_MAX], f[32];
    assert_true(keys_item(k, sizeof(k), harness_conf.redis.key_prefix, item, KEYS_ITEM_ORDERS) > 0);
    snprintf(f, sizeof(f), "o:%" PRId64, order);
    redisContext *rc = harness_redis(&harness_conf);
    redisReply *r = harness_cmd(rc, "HGET %s %s", k, f);
    snprintf(out, len, "%s", r->type == REDIS_REPLY_STRING ? r->str : "(none)");
    freeReplyObject(r);
    redisFree(rc);
}

static long long redis_stock(int64_t item)
{
    char k[KEYS_MAX];
    assert_true(keys_item(k, sizeof(k), harness_conf.redis.key_prefix, item, KEYS_ITEM_STOCK) > 0);
    redisContext *rc = harness_redis(&harness_conf);
    long long v = harness_int(rc, "GET %s", k);
    redisFree(rc);
    return v;
}

/* An item of stock units, its buyers given pay_s seconds to pay. */
static int64_t item_create(int64_t stock, int pay_s)
{
    char sid[24], sstock[24], spay[24], *out = NULL;
    int64_t item = 960000000 + (int64_t)util_rand_below(9999999);
    snprintf(sid, sizeof(sid), "%" PRId64, item);
    snprintf(sstock, sizeof(sstock), "%" PRId64, stock);
    snprintf(spay, sizeof(spay), "%d", pay_s);
    if (S.nitems < (int)ARRAY_SIZE(S.items))
        S.items[S.nitems++] = item;
    const char *args[] = { "-c", S.cfgpath, "item", "create", "--id", sid, "--stock", sstock, "--pay-within", spay,
                           NULL };
    int st = harness_run(&out, "seckillctl", args, 30000);
    if (st != 0 || !strstr(out, "to be paid within"))
        fail_msg("seckillctl item create --pay-within %d: exit %d: %s", pay_s, st, out);
    free(out);
    return item;
}

/* Ids of this run's orders, in its block: 4,096 per item (by its place in
 * S.items), the item's i-th. */
static int64_t order_id(int64_t item, int i)
{
    int slot = 0;
    while (slot < S.nitems && S.items[slot] != item)
        slot++;
    assert_true(slot < S.nitems && i >= 0 && i < 4096);
    return (S.block << ORDER_ID_SEQ_BITS) | ((int64_t)slot << 12) | i;
}

/* An id of the run's block no order of it has (above the items' ids): a
 * payment for an order that never comes, though a producer could have
 * issued it. */
static int64_t unknown_id(int i)
{
    assert_true(i >= 0 && i < (1 << 18));
    return (S.block << ORDER_ID_SEQ_BITS) | (INT64_C(1) << 19) | i;
}

/* n orders of item for users first..first+n-1, published (in groups of
 * spread, gap_ms apart: their pay_by apart too) and persisted
 * pending_payment. */
static void orders_spread(int64_t item, int64_t first, int n, int spread, int gap_ms)
{
    bool ok;
    for (int i = 0; i < n; i++) {
        publish_order(order_id(item, i), first + i, item);
        if ((i + 1) % spread == 0 && i + 1 < n) {
            flush(S.orders);
            util_sleep_ms(gap_ms);
        }
    }
    flush(S.orders);
    WAIT_UNTIL(life_orders_in(item, "pending_payment") == n, 20000, ok);
    if (!ok)
        fail_msg("%lld of %d orders pending payment; see %s",
                 (long long)life_orders_in(item, "pending_payment"), n, S.clog);
}

static void orders_pending(int64_t item, int64_t first, int n)
{
    orders_spread(item, first, n, n, 0);
}

/* --- the tests ---------------------------------------------------------------------- */

/* A fetched payment's first checks, as the consumer makes them: the
 * message, then its key. */
static int pay_decode(const char *json, size_t len, const char *key, size_t key_len, struct pay_msg *m, char *err,
                      size_t errlen)
{
    if (paymsg_decode(json, len, m, err, errlen) != 0)
        return -1;
    return paymsg_check_key(m, key, key_len, err, errlen);
}

/* The message's rules, without the stack: what is taken and what is not. */
static void test_decode(void **state)
{
    (void)state;
    struct pay_msg m;
    char err[256];
    const char *good = "{\"v\":1,\"order_id\":\"42\",\"user_id\":7,\"paid_at_ms\":1700000000000,\"ref\":\"tx-1.a:B_9\"}";
    assert_int_equal(pay_decode(good, strlen(good), "7", 1, &m, err, sizeof(err)), 0);
    assert_int_equal(m.order_id, 42);
    assert_int_equal(m.user_id, 7);
    assert_int_equal(m.paid_at_ms, INT64_C(1700000000000));
    assert_string_equal(m.ref, "tx-1.a:B_9");
    static const struct {
        const char *json, *key, *why;
    } bad[] = {
        { "{\"v\":1,", "7", "bad JSON" },
        { "[1]", "7", "not a JSON object" },
        { "{\"v\":2,\"order_id\":\"42\",\"user_id\":7,\"paid_at_ms\":1,\"ref\":\"r\"}", "7", "unknown version 2" },
        { "{\"v\":1,\"order_id\":42,\"user_id\":7,\"paid_at_ms\":1,\"ref\":\"r\"}", "7", "\"order_id\" string" },
        { "{\"v\":1,\"order_id\":\"-4\",\"user_id\":7,\"paid_at_ms\":1,\"ref\":\"r\"}", "7", "\"order_id\" is not" },
        { "{\"v\":1,\"order_id\":\"42\",\"user_id\":0,\"paid_at_ms\":1,\"ref\":\"r\"}", "0", "\"user_id\" out of" },
        { "{\"v\":1,\"order_id\":\"42\",\"user_id\":7,\"ref\":\"r\"}", "7", "missing \"paid_at_ms\"" },
        { "{\"v\":1,\"order_id\":\"42\",\"user_id\":7,\"paid_at_ms\":1,\"ref\":\"\"}", "7", "\"ref\" is not" },
        { "{\"v\":1,\"order_id\":\"42\",\"user_id\":7,\"paid_at_ms\":1,\"ref\":\"a b\"}", "7", "\"ref\" is not" },
        { "{\"v\":1,\"order_id\":\"42\",\"user_id\":7,\"paid_at_ms\":1,\"ref\":\"r\",\"ref\":\"s\"}", "7", "bad JSON" },
        { "{\"v\":1,\"order_id\":\"42\",\"user_id\":7,\"paid_at_ms\":1,\"ref\":\"r\"}", "8", "key is not the user" },
        { "{\"v\":1,\"order_id\":\"42\",\"user_id\":7,\"paid_at_ms\":1,\"ref\":\"r\"}", NULL,
          "no key: a payment is keyed by its user id" },
    };
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        err[0] = '\0';
        int rc = pay_decode(bad[i].json, strlen(bad[i].json), bad[i].key, bad[i].key ? strlen(bad[i].key) : 0,
                            &m, err, sizeof(err));
        if (rc != -1 || !strstr(err, bad[i].why))
            fail_msg("case %zu (%s): %d, \"%s\", wanted \"%s\"", i, bad[i].json, rc, err, bad[i].why);
    }
    char ref65[80];
    memset(ref65, 'r', 65);
    ref65[65] = '\0';
    char json[200];
    int n = snprintf(json, sizeof(json), "{\"v\":1,\"order_id\":\"1\",\"user_id\":7,\"paid_at_ms\":1,\"ref\":\"%s\"}",
                     ref65);
    assert_int_equal(pay_decode(json, (size_t)n, "7", 1, &m, err, sizeof(err)), -1);
    ref65[64] = '\0';
    n = snprintf(json, sizeof(json), "{\"v\":1,\"order_id\":\"1\",\"user_id\":7,\"paid_at_ms\":1,\"ref\":\"%s\"}",
                 ref65);
    assert_int_equal(pay_decode(json, (size_t)n, "7", 1, &m, err, sizeof(err)), 0);
}

/* The payment service's user writes the payments topic and nothing else:
 * the broker refuses its orders and its dead letters. */
static rd_kafka_resp_err_t delivered;
static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    (void)opaque;
    delivered = m->err;
}

static rd_kafka_resp_err_t produce_as_payment(const char *topic)
{
    char err[512];
    rd_kafka_conf_t *conf = harness_kafka_conf(&harness_conf, "payment");
    assert_int_equal(rd_kafka_conf_set(conf, "message.timeout.ms", "15000", err, sizeof(err)), RD_KAFKA_CONF_OK);
    assert_int_equal(rd_kafka_conf_set(conf, "log_level", "0", err, sizeof(err)), RD_KAFKA_CONF_OK);
    rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    assert_non_null(rk);
    delivered = RD_KAFKA_RESP_ERR__IN_PROGRESS;
    assert_int_equal(rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY("1", 1),
                                       RD_KAFKA_V_VALUE("acl-test", 8), RD_KAFKA_V_END),
                     RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_flush(rk, KAFKA_WAIT_MS);
    rd_kafka_destroy(rk);
    return delivered;
}

static void test_payment_user_writes_payments_only(void **state)
{
    (void)state;
    assert_int_equal(produce_as_payment("seckill.orders"), RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED);
    assert_int_equal(produce_as_payment("seckill.orders.dlq"), RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED);
    assert_int_equal(produce_as_payment(S.topic), RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED);
    assert_int_equal(produce_as_payment(S.dlq), RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED);
}

/* A payment pays its order (PostgreSQL, then 'p' in Redis); the same payment
 * again changes nothing; another payment of the paid order is late. */
static void test_pay_then_replay(void **state)
{
    (void)state;
    /* 600 s: the order it leaves waiting must not expire before the suite's
     * last test compares the stores before and after a replay (the suite
     * takes about a minute). */
    int64_t item = item_create(3, 600), u = S.user_lo, paid_at = util_wall_ms();
    int64_t o = order_id(item, 0);
    int64_t applied = metric("seckill_consumer_payments_applied_total");
    int64_t replayed = metric("seckill_consumer_payments_replayed_total");
    int64_t late = metric("seckill_consumer_late_payments_total");
    char st[256], want[64];
    bool ok;
    orders_pending(item, u, 2);
    publish_payment(o, u, paid_at, "pay-1");
    flush(S.pay);
    WAIT_UNTIL(life_orders_in(item, "paid") == 1, 15000, ok);
    if (!ok)
        fail_msg("the order was not paid; see %s", S.clog);
    assert_int_equal(
        life_pg_int2("SELECT count(*) FROM orders WHERE order_id = $1 AND status = 'paid' AND "
                     "status_reason = 'paid pay-1' AND status_changed_at = timestamptz 'epoch' + "
                     "$2::bigint * interval '1 millisecond'",
                     o, paid_at),
        1);
    assert_int_equal(life_orders_in(item, "pending_payment"), 1); /* the other order waits still */
    snprintf(want, sizeof(want), "|p|");
    WAIT_UNTIL((redis_state(item, o, st, sizeof(st)), strstr(st, want) != NULL), 5000, ok);
    if (!ok)
        fail_msg("Redis holds \"%s\" for the paid order; see %s", st, S.clog);
    snprintf(want, sizeof(want), "|%" PRId64, paid_at);
    assert_non_null(strstr(st, want)); /* its detail: when it was paid */
    WAIT_UNTIL(metric("seckill_consumer_payments_applied_total") == applied + 1, 5000, ok);
    assert_true(ok);

    /* The same payment again: a replay, nothing changes. */
    publish_payment(o, u, paid_at + 5000, "pay-1");
    flush(S.pay);
    WAIT_UNTIL(metric("seckill_consumer_payments_replayed_total") == replayed + 1, 15000, ok);
    if (!ok)
        fail_msg("the replay was not counted; see %s", S.clog);
    assert_int_equal(life_pg_int2("SELECT count(*) FROM orders WHERE order_id = $1 AND status_changed_at = "
                                  "timestamptz 'epoch' + $2::bigint * interval '1 millisecond'",
                                  o, paid_at),
                     1);
    assert_int_equal(metric("seckill_consumer_payments_applied_total"), applied + 1);
    assert_int_equal(late_rows(o, "paid_other"), 0);

    /* Another payment of a paid order: paid twice, recorded for a refund. */
    publish_payment(o, u, paid_at + 9000, "pay-2");
    flush(S.pay);
    WAIT_UNTIL(late_rows(o, "paid_other") == 1, 15000, ok);
    if (!ok)
        fail_msg("no late payment recorded for the second payment; see %s", S.clog);
    WAIT_UNTIL(metric("seckill_consumer_late_payments_total") == late + 1, 5000, ok);
    assert_true(ok);
    assert_int_equal(
        life_pg_int("SELECT count(*) FROM orders WHERE order_id = $1 AND status_reason = 'paid pay-1'", o),
        1);
    assert_int_equal(life_stock_left(item), 1);
}

/* A payment of an expired order is late: recorded (once), the order stays
 * expired and its unit where the expiry put it. */
static void test_late_payment_of_expired_order(void **state)
{
    (void)state;
    int64_t item = item_create(2, 1), u = S.user_lo + 10;
    int64_t o = order_id(item, 0);
    int64_t late = metric("seckill_consumer_late_payments_total");
    int64_t replayed = metric("seckill_consumer_payments_replayed_total");
    bool ok;
    orders_pending(item, u, 1);
    WAIT_UNTIL(
        life_orders_in(item, "expired") == 1 &&
            life_pg_int("SELECT count(*) FROM order_returns WHERE item_id = $1 AND done_at IS NOT NULL",
                        item) == 1,
        15000, ok);
    if (!ok)
        fail_msg("the order did not expire and come back; see %s", S.clog);
    int64_t left = life_stock_left(item);
    long long rstock = redis_stock(item);
    assert_int_equal(left, 2);

    publish_payment(o, u, util_wall_ms(), "late-1");
    flush(S.pay);
    WAIT_UNTIL(late_rows(o, "expired") == 1, 15000, ok);
    if (!ok)
        fail_msg("no late payment recorded; see %s", S.clog);
    WAIT_UNTIL(metric("seckill_consumer_late_payments_total") == late + 1, 5000, ok);
    assert_true(ok);
    assert_int_equal(life_orders_in(item, "expired"), 1);
    assert_int_equal(life_orders_in(item, "paid"), 0);
    assert_int_equal(life_stock_left(item), left);
    assert_int_equal(redis_stock(item), rstock);
    assert_int_equal(life_pg_int("SELECT count(*) FROM order_returns WHERE item_id = $1", item), 1);

    /* Again: recorded once. */
    publish_payment(o, u, util_wall_ms(), "late-1");
    flush(S.pay);
    WAIT_UNTIL(metric("seckill_consumer_payments_replayed_total") == replayed + 1, 15000, ok);
    assert_true(ok);
    assert_int_equal(life_pg_int("SELECT count(*) FROM late_payments WHERE order_id = $1", o), 1);
    assert_int_equal(life_stock_left(item), left);

    /* An order the consumer refused (order_rejections, which the consumer
     * may not read: order_refused() answers for it) is late too. */
    char sql[256];
    int64_t refused = order_id(item, 1);
    snprintf(sql, sizeof(sql),
             "INSERT INTO order_rejections (order_id, user_id, item_id, reason, reserved_at) "
             "VALUES ($1, $2, %" PRId64 ", 'no_stock', now())",
             item);
    assert_int_equal(harness_pg_try(&harness_conf, sql, refused, u + 1), 0);
    publish_payment(refused, u + 1, util_wall_ms(), "late-2");
    flush(S.pay);
    WAIT_UNTIL(late_rows(refused, "refused") == 1, 15000, ok);
    if (!ok)
        fail_msg("no late payment recorded for a refused order; see %s", S.clog);
    assert_int_equal(life_pg_int("SELECT count(*) FROM orders WHERE order_id = $1", refused), 0);
    assert_int_equal(life_stock_left(item), left);
}

/* Each of N orders paid right at its pay_by while the expiry runs: every
 * order ends either paid or expired with its payment recorded late, and
 * only the expired ones give their unit back. */
static void test_payments_race_the_expiry(void **state)
{
    (void)state;
    enum { MAX = 1000 };
    const char *env = getenv("SECKILL_PAY_RACE");
    int N = env ? atoi(env) : MAX;
    N = N < 20 ? 20 : N > MAX ? MAX : N;
    /* Users of their own: the burst's are S.user_lo + 1000 on. */
    int64_t item = item_create(N, 3), first = S.user_lo + 4096 - MAX;
    int64_t applied = metric("seckill_consumer_payments_applied_total");
    int64_t late = metric("seckill_consumer_late_payments_total");
    int64_t ids[MAX], users[MAX], pay_by[MAX];
    bool ok;
    /* Their windows end over a second (20 groups 50 ms apart), so the
     * expiry's passes (every 100 ms) fall between the payments as much as
     * before them. */
    orders_spread(item, first, N, N / 20, 50);
    life_orders_by_pay_by(item, N, ids, users, pay_by);

    /* Each payment published at its order's pay_by, paid then. */
    for (int i = 0; i < N; i++) {
        int64_t wait = pay_by[i] - util_wall_ms();
        if (wait > 0) {
            rd_kafka_poll(S.pay, 0);
            util_sleep_ms(wait);
        }
        char ref[32];
        snprintf(ref, sizeof(ref), "race-%d", i);
        publish_payment(ids[i], users[i], pay_by[i], ref);
    }
    flush(S.pay);
    WAIT_UNTIL(life_orders_in(item, "paid") +
                       life_pg_int("SELECT count(*) FROM late_payments l JOIN orders o USING "
                                   "(order_id) WHERE o.item_id = $1",
                                   item) ==
                   N,
               30000, ok);
    int64_t paid = life_orders_in(item, "paid"), expired = life_orders_in(item, "expired");
    printf("# %lld paid, %lld expired and paid late\n", (long long)paid, (long long)expired);
    if (!ok)
        fail_msg("%lld paid, %lld expired, %lld late payments; see %s", (long long)paid, (long long)expired,
                 (long long)life_pg_int("SELECT count(*) FROM late_payments l JOIN orders o USING (order_id) "
                                        "WHERE o.item_id = $1",
                                        item),
                 S.clog);
    assert_int_equal(paid + expired, N);
    /* The expired ones, each with its payment recorded late; no paid one. */
    assert_int_equal(life_pg_int("SELECT count(*) FROM late_payments l JOIN orders o USING (order_id) WHERE "
                                 "o.item_id = $1 AND o.status = 'expired' AND l.status_then = 'expired'",
                                 item),
                     expired);
    assert_int_equal(life_pg_int("SELECT count(*) FROM late_payments l JOIN orders o USING (order_id) WHERE "
                                 "o.item_id = $1 AND o.status <> 'expired'",
                                 item),
                     0);
    /* A unit back for each expired order, none for a paid one. */
    assert_int_equal(life_pg_int("SELECT count(*) FROM order_returns WHERE item_id = $1", item), expired);
    assert_int_equal(life_pg_int("SELECT count(*) FROM order_returns r JOIN orders o USING (order_id) WHERE "
                                 "r.item_id = $1 AND o.status = 'paid'",
                                 item),
                     0);
    assert_int_equal(life_stock_left(item), expired);
    assert_int_equal(
        life_pg_int(
            "SELECT count(*) FROM orders WHERE item_id = $1 AND status = 'paid' AND "
            "status_reason LIKE 'paid race-%' AND (extract(epoch FROM status_changed_at) * 1000)::bigint = "
            "(extract(epoch FROM pay_by) * 1000)::bigint",
            item),
        paid);
    WAIT_UNTIL(metric("seckill_consumer_payments_applied_total") == applied + paid &&
                   metric("seckill_consumer_late_payments_total") == late + expired,
               5000, ok);
    if (!ok)
        fail_msg("metrics: applied %lld (want %lld), late %lld (want %lld)",
                 (long long)(metric("seckill_consumer_payments_applied_total") - applied), (long long)paid,
                 (long long)(metric("seckill_consumer_late_payments_total") - late), (long long)expired);
}

/* Wait until the counter name is want (or fail, naming what). */
static void wait_metric(const char *name, int64_t want, const char *what)
{
    bool ok;
    WAIT_UNTIL(metric(name) == want, 30000, ok);
    if (!ok)
        fail_msg("%s: %s is %lld, want %lld; see %s", what, name, (long long)metric(name), (long long)want,
                 S.clog);
}

/* The dead letters on the suite's dead-letter topic, all of them to its
 * end (the tests' letters are counted by then): each one's error header
 * into why[i] (at most n); checks their source topic. How many. */
static int read_letters(char why[][128], int n)
{
    char err[512];
    int got = 0;
    rd_kafka_conf_t *conf = harness_kafka_conf(&harness_conf, "admin");
    assert_int_equal(rd_kafka_conf_set(conf, "enable.partition.eof", "true", err, sizeof(err)), RD_KAFKA_CONF_OK);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
    assert_non_null(rk);
    rd_kafka_topic_t *t = rd_kafka_topic_new(rk, S.dlq, NULL);
    assert_int_equal(rd_kafka_consume_start(t, 0, RD_KAFKA_OFFSET_BEGINNING), 0);
    for (int64_t end = util_mono_ms() + KAFKA_WAIT_MS; got < n && util_mono_ms() < end;) {
        rd_kafka_message_t *m = rd_kafka_consume(t, 0, 200);
        if (!m)
            continue;
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            rd_kafka_message_destroy(m);
            break;
        }
        rd_kafka_headers_t *h = NULL;
        const void *v;
        size_t len;
        if (!m->err && rd_kafka_message_headers(m, &h) == RD_KAFKA_RESP_ERR_NO_ERROR) {
            if (rd_kafka_header_get_last(h, "source_topic", &v, &len) == RD_KAFKA_RESP_ERR_NO_ERROR)
                assert_memory_equal(v, S.payments, strlen(S.payments));
            if (rd_kafka_header_get_last(h, "error", &v, &len) == RD_KAFKA_RESP_ERR_NO_ERROR)
                snprintf(why[got++], 128, "%.*s", (int)len, (const char *)v);
        }
        rd_kafka_message_destroy(m);
    }
    rd_kafka_consume_stop(t, 0);
    rd_kafka_topic_destroy(t);
    rd_kafka_destroy(rk);
    return got;
}

#define LETTERS_MAX 256

/* Each of want is in one of the n letters' reasons. */
static void letters_say(char why[][128], int n, const char *const *want, size_t nwant)
{
    for (size_t i = 0; i < nwant; i++) {
        bool found = false;
        for (int k = 0; k < n && !found; k++)
            found = strstr(why[k], want[i]) != NULL;
        if (!found)
            fail_msg("no dead letter of %d says \"%s\" (the first: %s)", n, want[i], n ? why[0] : "none");
    }
}

/* Malformed payments are dead-lettered with their reasons; a payment whose
 * order never comes too, once consumer.payment_wait_ms is over; and one
 * published before its order waits for it and pays it. */
static void test_dead_letters_and_early_payments(void **state)
{
    (void)state;
    int64_t item = item_create(2, 60), u = S.user_lo + 20, now = util_wall_ms();
    int64_t early = order_id(item, 0), never = order_id(item, 1);
    int64_t letters = metric("seckill_consumer_payments_dead_lettered_total");
    int64_t applied = metric("seckill_consumer_payments_applied_total");
    char key[24], why[LETTERS_MAX][128], st[256];
    bool ok;
    snprintf(key, sizeof(key), "%" PRId64, u);
    life_produce(S.pay, S.payments, key, "{\"v\":1,", 6);
    const char *v2 = "{\"v\":2,\"order_id\":\"1\",\"user_id\":1,\"paid_at_ms\":1,\"ref\":\"r\"}";
    life_produce(S.pay, S.payments, "1", v2, strlen(v2));
    char other[200];
    int n = snprintf(other, sizeof(other),
                     "{\"v\":1,\"order_id\":\"%" PRId64 "\",\"user_id\":%" PRId64 ",\"paid_at_ms\":1,\"ref\":\"r\"}",
                     early, u);
    life_produce(S.pay, S.payments, "1", other, (size_t)n); /* keyed by another user */
    publish_payment(never, u + 1, now, "never-1");
    publish_payment(early, u, now, "early-1");
    flush(S.pay);

    /* The early one waits (so does the one whose order never comes). */
    WAIT_UNTIL(metric("seckill_consumer_payments_waiting") >= 1, 10000, ok);
    if (!ok)
        fail_msg("no payment waits for its order; see %s", S.clog);
    assert_int_equal(life_orders_in(item, "paid"), 0);
    publish_order(early, u, item);
    flush(S.orders);
    WAIT_UNTIL(life_orders_in(item, "paid") == 1, 15000, ok);
    if (!ok)
        fail_msg("the early payment did not pay its order once persisted; see %s", S.clog);
    assert_int_equal(
        life_pg_int("SELECT count(*) FROM orders WHERE order_id = $1 AND status = 'paid'", early), 1);
    WAIT_UNTIL((redis_state(item, early, st, sizeof(st)), strstr(st, "|p|") != NULL), 5000, ok);
    if (!ok)
        fail_msg("Redis holds \"%s\" for the early-paid order", st);

    /* Three malformed at once, the unknown order after the wait. */
    WAIT_UNTIL(metric("seckill_consumer_payments_dead_lettered_total") == letters + 4, 15000, ok);
    if (!ok)
        fail_msg("%lld dead letters of 4; see %s",
                 (long long)(metric("seckill_consumer_payments_dead_lettered_total") - letters), S.clog);
    assert_int_equal(metric("seckill_consumer_payments_waiting"), 0);
    assert_int_equal(metric("seckill_consumer_payments_applied_total"), applied + 1);
    const char *want[] = { "bad JSON", "unknown version 2", "key is not the user id", "order unknown" };
    letters_say(why, read_letters(why, LETTERS_MAX), want, ARRAY_SIZE(want));
    assert_int_equal(life_pg_int("SELECT count(*) FROM orders WHERE order_id = $1", never), 0);
    assert_int_equal(life_pg_int("SELECT count(*) FROM late_payments WHERE order_id = $1", never), 0);
}

/* A statement the server refuses for what one payment brings to it (here
 * its order's row: a status time pay_order.sql cannot turn into
 * milliseconds) holds up no other payment: the batch is rolled back, its
 * payments applied again one per transaction, and the one refused alone
 * goes to the dead-letter topic with the server's words; its order and
 * late_payments are left alone. (Before, every failure was "PostgreSQL
 * down": the batch was held back and retried forever.) */
static void test_payment_refused_as_data_dead_lettered(void **state)
{
    (void)state;
    int64_t item = item_create(3, 60), u = S.user_lo + 70;
    int64_t poison = order_id(item, 1);
    int64_t letters = metric("seckill_consumer_payments_dead_lettered_total");
    int64_t applied = metric("seckill_consumer_payments_applied_total");
    char why[LETTERS_MAX][128];
    const char *want[] = { "refused by PostgreSQL: order: ERROR:  cannot convert infinity to bigint" };
    bool ok;
    orders_pending(item, u, 3);
    assert_int_equal(harness_pg_try(&harness_conf,
                                    "UPDATE orders SET status = 'expired', status_changed_at = 'infinity' "
                                    "WHERE order_id = $1 AND user_id = $2",
                                    poison, u + 1),
                     0);
    for (int i = 0; i < 3; i++)
        publish_payment(order_id(item, i), u + i, util_wall_ms(), i == 1 ? "poison-1" : "fine-1");
    flush(S.pay);
    WAIT_UNTIL(metric("seckill_consumer_payments_dead_lettered_total") == letters + 1, 20000, ok);
    if (!ok)
        fail_msg("the payment PostgreSQL refuses was not dead-lettered; see %s", S.clog);
    WAIT_UNTIL(life_orders_in(item, "paid") == 2, 10000, ok);
    if (!ok)
        fail_msg("%lld of the 2 other orders paid; see %s", (long long)life_orders_in(item, "paid"), S.clog);
    WAIT_UNTIL(metric("seckill_consumer_payments_applied_total") == applied + 2, 5000, ok);
    assert_true(ok);
    letters_say(why, read_letters(why, LETTERS_MAX), want, ARRAY_SIZE(want));
    assert_int_equal(
        life_pg_int("SELECT count(*) FROM orders WHERE order_id = $1 AND status = 'expired'", poison), 1);
    assert_int_equal(life_pg_int("SELECT count(*) FROM late_payments WHERE order_id = $1", poison), 0);
    /* Nothing is held back after it: the next payment is applied at once. */
    publish_payment(order_id(item, 0), u, util_wall_ms(), "fine-2");
    flush(S.pay);
    WAIT_UNTIL(late_rows(order_id(item, 0), "paid_other") == 1, 15000, ok);
    if (!ok)
        fail_msg("a payment after the refused one was not recorded; see %s", S.clog);
    assert_int_equal(metric("seckill_consumer_payments_dead_lettered_total"), letters + 1);
}

/* A payment of order with sig as it is ("": unsigned), published as a
 * forger holding the payments topic's password would. */
static void publish_raw_payment(int64_t order, int64_t user, int64_t paid_at, const char *ref, const char *sig)
{
    struct pay_msg m = { .order_id = order, .user_id = user, .paid_at_ms = paid_at };
    char buf[PAY_MSG_MAX], key[24];
    snprintf(m.ref, sizeof(m.ref), "%s", ref);
    snprintf(m.sig, sizeof(m.sig), "%s", sig);
    int n = paymsg_encode(&m, buf, sizeof(buf));
    assert_true(n > 0);
    snprintf(key, sizeof(key), "%" PRId64, user);
    life_produce(S.pay, S.payments, key, buf, (size_t)n);
}

/* A key set of one entry (KID:FILE) on the suite's configuration. */
static struct keyring *keys_of(const char *entry)
{
    struct cfg c = S.c; /* a shallow copy: only its key list differs */
    char *v[] = { (char *)entry }, err[1024];
    struct keyring *ks = NULL;
    c.kafka.payment_keys = (struct cfg_list){ v, 1 };
    if (psig_keys_load(&c, &ks, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    return ks;
}

/* #55 §2: payments no payment key signed are dead-lettered with their
 * reasons and counted, and change nothing: unsigned, a real MAC over
 * another payment, a forger's own key under the payment key's id, a key id
 * the consumer lacks, and an unsigned payment of an expired order (which a
 * real one would record in late_payments). The real payment then pays. */
static void test_forged_payments(void **state)
{
    (void)state;
    int64_t item = item_create(2, 60), gone_item = item_create(1, 1), u = S.user_lo + 50, now = util_wall_ms();
    int64_t o = order_id(item, 0), gone = order_id(gone_item, 0);
    int64_t letters = metric("seckill_consumer_payments_dead_lettered_total");
    int64_t unsig = metric("seckill_consumer_payments_unsigned_total");
    int64_t applied = metric("seckill_consumer_payments_applied_total");
    int64_t late = metric("seckill_consumer_late_payments_total");
    char path[128], entry[160], why[LETTERS_MAX][128];
    bool ok;
    orders_pending(item, u, 1);
    orders_pending(gone_item, u + 1, 1);
    WAIT_UNTIL(life_orders_in(gone_item, "expired") == 1, 15000, ok);
    if (!ok)
        fail_msg("the order did not expire; see %s", S.clog);

    publish_raw_payment(o, u, now, "forged-1", "");
    /* The payment service's MAC of a payment of 1 at now, on one of 2. */
    struct pay_msg real = { .order_id = o, .user_id = u, .paid_at_ms = now };
    snprintf(real.ref, sizeof(real.ref), "forged-2");
    assert_int_equal(psig_sign(&real), 0);
    publish_raw_payment(o, u, now + 1, "forged-2", real.sig);
    /* A forger's own key, named p1. */
    snprintf(path, sizeof(path), "/tmp/sktest-payments-forger-%d", (int)getpid());
    harness_write_secret(path, "a forger's key, 32 bytes or more, named as the real one");
    snprintf(entry, sizeof(entry), "p1:%s", path);
    struct keyring *forger = keys_of(entry);
    struct pay_msg f = { .order_id = o, .user_id = u, .paid_at_ms = now };
    snprintf(f.ref, sizeof(f.ref), "forged-3");
    assert_int_equal(psig_keys_sign(forger, &f), 0);
    keyring_free(forger);
    unlink(path);
    publish_raw_payment(o, u, now, "forged-3", f.sig);
    publish_raw_payment(o, u, now, "forged-4", "zz:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff");
    publish_raw_payment(gone, u + 1, now, "forged-5", "");
    flush(S.pay);

    WAIT_UNTIL(metric("seckill_consumer_payments_dead_lettered_total") == letters + 5, 15000, ok);
    if (!ok)
        fail_msg("%lld dead letters of 5; see %s",
                 (long long)(metric("seckill_consumer_payments_dead_lettered_total") - letters), S.clog);
    assert_int_equal(metric("seckill_consumer_payments_unsigned_total"), unsig + 5);
    assert_int_equal(metric("seckill_consumer_payments_applied_total"), applied);
    assert_int_equal(metric("seckill_consumer_late_payments_total"), late);
    assert_int_equal(life_orders_in(item, "pending_payment"), 1);
    assert_int_equal(life_orders_in(gone_item, "expired"), 1);
    assert_int_equal(life_pg_int2("SELECT count(*) FROM late_payments WHERE order_id IN ($1, $2)", o, gone), 0);
    const char *want[] = { "not signed by a payment key: no signature",
                           "not signed by a payment key: bad signature (key id p1)",
                           "not signed by a payment key: unknown key id zz" };
    letters_say(why, read_letters(why, LETTERS_MAX), want, ARRAY_SIZE(want));

    /* The payment service's own payment pays the order. */
    publish_payment(o, u, now, "real-1");
    flush(S.pay);
    WAIT_UNTIL(life_orders_in(item, "paid") == 1, 15000, ok);
    if (!ok)
        fail_msg("the real payment did not pay the order; see %s", S.clog);
    assert_int_equal(
        life_pg_int("SELECT count(*) FROM orders WHERE order_id = $1 AND status_reason = 'paid real-1'", o), 1);
}

/* Write the suite's consumer a configuration with kafka.payment_keys set
 * to entries, and SIGHUP it. */
static void reload_payment_keys(const char *const *entries, size_t n)
{
    char path[256];
    struct cfg_list saved = S.c.kafka.payment_keys;
    S.c.kafka.payment_keys = (struct cfg_list){ (char **)entries, n };
    harness_cfg_file(&S.c, path, sizeof(path));
    S.c.kafka.payment_keys = saved;
    assert_int_equal(rename(path, S.cfgpath), 0);
    kill(S.cons, SIGHUP);
}

/* A payment key rotated on SIGHUP: a bad key file refuses the reload, and
 * the key the consumer had still verifies; a new key added first is taken,
 * and payments signed by either key pay. */
static void test_payment_key_rotation(void **state)
{
    (void)state;
    int64_t item = item_create(3, 60), u = S.user_lo + 60;
    char k2[128], entry[160], p1[600];
    bool ok;
    orders_pending(item, u, 3);
    snprintf(p1, sizeof(p1), "p1:%s/%s", S.c.kafka.payment_key_dir, strchr(S.c.kafka.payment_keys.v[0], ':') + 1);
    snprintf(k2, sizeof(k2), "/tmp/sktest-payments-k2-%d", (int)getpid());
    harness_write_secret(k2, "a second payment key, 32 bytes or more, for the rotation");
    snprintf(entry, sizeof(entry), "p2:%s", k2);

    const char *bad[] = { "p2:/nonexistent/payment-key" };
    reload_payment_keys(bad, 1);
    WAIT_UNTIL(harness_file_has(S.clog, "/nonexistent/payment-key"), 20000, ok);
    if (!ok)
        fail_msg("the reload with a bad payment key file was not refused; see %s", S.clog);
    publish_payment(order_id(item, 0), u, util_wall_ms(), "rot-1"); /* p1, still held */
    flush(S.pay);
    WAIT_UNTIL(life_orders_in(item, "paid") == 1, 15000, ok);
    if (!ok)
        fail_msg("the refused reload dropped the payment key; see %s", S.clog);

    const char *both[] = { entry, p1 };
    reload_payment_keys(both, 2);
    WAIT_UNTIL(harness_file_has(S.clog, "payment keys: 2 loaded"), 20000, ok);
    if (!ok)
        fail_msg("the payment keys were not reloaded; see %s", S.clog);
    struct keyring *signer = keys_of(entry);
    struct pay_msg m = { .order_id = order_id(item, 1), .user_id = u + 1, .paid_at_ms = util_wall_ms() };
    snprintf(m.ref, sizeof(m.ref), "rot-2");
    assert_int_equal(psig_keys_sign(signer, &m), 0);
    keyring_free(signer);
    publish_raw_payment(m.order_id, m.user_id, m.paid_at_ms, m.ref, m.sig);
    publish_payment(order_id(item, 2), u + 2, util_wall_ms(), "rot-3"); /* p1 */
    flush(S.pay);
    WAIT_UNTIL(life_orders_in(item, "paid") == 3, 15000, ok);
    /* Back to the suite's own keys, for the tests after this one. */
    const char *own[] = { p1 };
    reload_payment_keys(own, 1);
    WAIT_UNTIL(harness_file_lines(S.clog, "payment keys: 1 loaded") >= 1, 20000, ok);
    unlink(k2);
    if (life_orders_in(item, "paid") != 3)
        fail_msg("%lld of 3 paid after the rotation; see %s", (long long)life_orders_in(item, "paid"), S.clog);
    assert_true(ok);
}

/* Write S.c as the suite consumer's configuration, SIGHUP it and wait for
 * the reload to be taken. */
static void reload_consumer(void)
{
    char path[256];
    bool ok;
    int before = harness_file_lines(S.clog, "configuration reloaded from");
    harness_cfg_file(&S.c, path, sizeof(path));
    assert_int_equal(rename(path, S.cfgpath), 0);
    kill(S.cons, SIGHUP);
    WAIT_UNTIL(harness_file_lines(S.clog, "configuration reloaded from") > before, 20000, ok);
    if (!ok)
        fail_msg("the consumer did not reload; see %s", S.clog);
}

/* Publish n payments, signed, for ids of the run's block that no order has
 * (unknown_id(first..first+n-1)), by users of their own, through rk. */
static void publish_unknown(rd_kafka_t *rk, int first, int n, const char *prefix)
{
    char ref[32];
    for (int i = first; i < first + n; i++) {
        snprintf(ref, sizeof(ref), "%s-%d", prefix, i);
        life_payment(rk, S.payments, unknown_id(i), S.user_lo + 200 + i % 700, util_wall_ms(), ref);
    }
}

/* #55 §3: a payment for an id no producer could have issued (block 0, or a
 * block above the highest order_id_blocks holds) is dead-lettered at once,
 * not after consumer.payment_wait_ms; an id of a block taken after the
 * consumer last read the blocks is not refused (it reads them again). */
static void test_never_issued_ids_refused_at_once(void **state)
{
    (void)state;
    int64_t u = S.user_lo + 80, now = util_wall_ms();
    int64_t never = metric("seckill_consumer_payments_never_issued_total");
    int64_t letters = metric("seckill_consumer_payments_dead_lettered_total");
    int64_t max = life_pg_int("SELECT max(block) FROM order_id_blocks WHERE $1::bigint > 0", 1);
    char why[LETTERS_MAX][128];
    bool ok;
    int64_t t0 = util_mono_ms();
    publish_payment(42, u, now, "never-0");
    publish_payment(((max + 1000) << ORDER_ID_SEQ_BITS) | 7, u + 1, now, "never-1");
    flush(S.pay);
    WAIT_UNTIL(metric("seckill_consumer_payments_never_issued_total") == never + 2, 15000, ok);
    int64_t ms = util_mono_ms() - t0;
    if (!ok)
        fail_msg("%lld of 2 payments refused as never issued; see %s",
                 (long long)(metric("seckill_consumer_payments_never_issued_total") - never), S.clog);
    printf("# both refused %lld ms after they were published (consumer.payment_wait_ms %d)\n", (long long)ms,
           S.c.consumer.payment_wait_ms);
    assert_true(ms < S.c.consumer.payment_wait_ms);
    WAIT_UNTIL(metric("seckill_consumer_payments_dead_lettered_total") == letters + 2, 10000, ok);
    assert_true(ok);
    const char *want[] = { "order id never issued: its block is 0",
                           "order id never issued: its block", "is above the highest taken" };
    letters_say(why, read_letters(why, LETTERS_MAX), want, ARRAY_SIZE(want));

    /* A block taken now, above the one the consumer read: its order is
     * paid, not refused. */
    int64_t item = item_create(1, 60);
    int64_t block = life_pg_int("INSERT INTO order_id_blocks (host, pid) VALUES ('sktest-payments', $1::integer) "
                                "RETURNING block",
                                (int64_t)getpid());
    int64_t o = (block << ORDER_ID_SEQ_BITS) | 1;
    publish_order(o, u + 2, item);
    flush(S.orders);
    WAIT_UNTIL(life_orders_in(item, "pending_payment") == 1, 20000, ok);
    assert_true(ok);
    publish_payment(o, u + 2, util_wall_ms(), "new-block-1");
    flush(S.pay);
    WAIT_UNTIL(life_orders_in(item, "paid") == 1, 15000, ok);
    if (!ok)
        fail_msg("the payment of an order in a new block was not applied; see %s", S.clog);
    assert_int_equal(metric("seckill_consumer_payments_never_issued_total"), never + 2);
}

/* The small one of #55 §5: a hundred late payments (their orders expired)
 * are recorded, and the log says so in a line or two, not a line each. */
static void test_late_payments_logged_once(void **state)
{
    (void)state;
    enum { N = 100 };
    int64_t item = item_create(N, 2), first = S.user_lo + 3000;
    int64_t late = metric("seckill_consumer_late_payments_total");
    int lines = harness_file_lines(S.clog, "came when the order was");
    char ref[32];
    bool ok;
    for (int i = 0; i < N; i++)
        publish_order(order_id(item, i), first + i, item);
    flush(S.orders);
    WAIT_UNTIL(life_orders_in(item, "expired") == N, 30000, ok);
    if (!ok)
        fail_msg("%lld of %d orders expired; see %s", (long long)life_orders_in(item, "expired"), N, S.clog);
    for (int i = 0; i < N; i++) {
        snprintf(ref, sizeof(ref), "late-log-%d", i);
        publish_payment(order_id(item, i), first + i, util_wall_ms(), ref);
    }
    flush(S.pay);
    wait_metric("seckill_consumer_late_payments_total", late + N, "the late payments");
    WAIT_UNTIL(harness_file_lines(S.clog, "came when the order was") > lines, 20000, ok);
    if (!ok)
        fail_msg("the late payments were never said; see %s", S.clog);
    int said = harness_file_lines(S.clog, "came when the order was") - lines;
    printf("# %d late payments, said in %d lines\n", N, said);
    assert_true(said <= 2);
    assert_true(harness_file_has(S.clog, "late payments recorded in late_payments (the orders and the stock"));
}

/* The waiting set is bounded (consumer.payment_wait_max): past it, the
 * payment that waited longest is dead-lettered ("waiting set full",
 * counted) to make room, and every payment still ends somewhere: the ones
 * that stay wait out consumer.payment_wait_ms and are dead-lettered too. */
static void test_waiting_set_full(void **state)
{
    (void)state;
    enum { MAX = 100, N = 150 };
    int64_t letters = metric("seckill_consumer_payments_dead_lettered_total");
    int64_t full = metric("seckill_consumer_payments_wait_full_total");
    char why[LETTERS_MAX][128];
    bool ok;
    S.c.consumer.payment_wait_max = MAX;
    reload_consumer();
    publish_unknown(S.pay, 20000, N, "full");
    flush(S.pay);
    WAIT_UNTIL(metric("seckill_consumer_payments_wait_full_total") == full + (N - MAX), 15000, ok);
    int64_t waiting = metric("seckill_consumer_payments_waiting");
    if (!ok)
        fail_msg("%lld dead-lettered as the waiting set full, want %d; see %s",
                 (long long)(metric("seckill_consumer_payments_wait_full_total") - full), N - MAX, S.clog);
    assert_true(waiting <= MAX);
    /* The rest once their wait is over: all of them, each once. */
    wait_metric("seckill_consumer_payments_dead_lettered_total", letters + N, "every payment of the full set");
    assert_int_equal(metric("seckill_consumer_payments_wait_full_total"), full + (N - MAX));
    assert_int_equal(metric("seckill_consumer_payments_waiting"), 0);
    const char *want[] = { "waiting set full", "order unknown" };
    letters_say(why, read_letters(why, LETTERS_MAX), want, ARRAY_SIZE(want));
    S.c.consumer.payment_wait_max = 50000;
    reload_consumer();
}

/* #55 §3: 10,000 payments for orders that never come (ids a producer could
 * have issued) wait for them; a payment for a persisted order published
 * behind them is applied within 2 s: the waiting ones are looked for
 * without a lock, apart from the payments to apply, and do not count
 * towards the pause. They end as dead letters once consumer.payment_wait_ms
 * is over, each once, and the log says the wait once. */
static void test_unknown_payments_hold_back_none(void **state)
{
    (void)state;
    enum { N = 10000 };
    int64_t item = item_create(1, 10), u = S.user_lo + 90;
    int64_t letters = metric("seckill_consumer_payments_dead_lettered_total");
    int said = harness_file_lines(S.clog, "is not in PostgreSQL yet");
    bool ok;
    orders_pending(item, u, 1);
    rd_kafka_t *rk = life_producer(&harness_conf, "payment", "50");
    int64_t p0 = util_mono_ms();
    publish_unknown(rk, 0, N, "unknown");
    flush(rk);
    rd_kafka_destroy(rk);
    int64_t pub_ms = util_mono_ms() - p0;
    WAIT_UNTIL(metric("seckill_consumer_payments_waiting") >= N / 2, 20000, ok);
    if (!ok)
        fail_msg("%lld payments wait; see %s", (long long)metric("seckill_consumer_payments_waiting"), S.clog);

    int64_t t0 = util_mono_ms();
    publish_payment(order_id(item, 0), u, util_wall_ms(), "behind-10k");
    flush(S.pay);
    WAIT_UNTIL(life_orders_in(item, "paid") == 1, 30000, ok);
    int64_t ms = util_mono_ms() - t0;
    int64_t waiting = metric("seckill_consumer_payments_waiting");
    printf("# %d unknown payments published in %lld ms; the real one behind them applied in %lld ms "
           "(%lld waiting then)\n",
           N, (long long)pub_ms, (long long)ms, (long long)waiting);
    if (!ok)
        fail_msg("the real payment was not applied; see %s", S.clog);
    assert_true(ms < 2000);

    wait_metric("seckill_consumer_payments_dead_lettered_total", letters + N, "the unknown payments");
    WAIT_UNTIL(metric("seckill_consumer_payments_waiting") == 0, 10000, ok);
    assert_true(ok);
    assert_int_equal(harness_file_lines(S.clog, "is not in PostgreSQL yet"), said + 1);
    assert_int_equal(life_pg_int2("SELECT count(*) FROM orders WHERE order_id BETWEEN $1 AND $2",
                                  unknown_id(0), unknown_id(N - 1)),
                     0);
}

/* Turn the consumer's Redis user on or off; off also drops its
 * connections: the consumer's Redis is gone until it is on again. */
static void user_switch(bool on)
{
    redisContext *rc = harness_redis(&harness_conf);
    freeReplyObject(harness_cmd(rc, "ACL SETUSER %s %s", S.user, on ? "on" : "off"));
    if (!on)
        freeReplyObject(harness_cmd(rc, "CLIENT KILL USER %s", S.user));
    redisFree(rc);
}

/* Redis away (no user's lock): a payment waits, said once, and pays its
 * order once Redis is back. PostgreSQL's session gone (the server ended
 * it): the next payment connects again and pays its order. */
static void test_payment_waits_out_redis_and_postgres(void **state)
{
    (void)state;
    int64_t item = item_create(2, 60), u = S.user_lo + 30, o;
    int64_t applied = metric("seckill_consumer_payments_applied_total");
    const char *said = "no user's lock";
    char st[256];
    int before = harness_file_lines(S.clog, said);
    bool ok;
    orders_pending(item, u, 2);
    o = order_id(item, 0);
    user_switch(false);
    publish_payment(o, u, util_wall_ms(), "away-1");
    flush(S.pay);
    WAIT_UNTIL(harness_file_lines(S.clog, said) > before, 15000, ok);
    if (!ok) {
        user_switch(true);
        fail_msg("no line says the user's lock cannot be had; see %s", S.clog);
    }
    util_sleep_ms(1000); /* retried meanwhile, and not said again */
    int64_t paid_meanwhile = life_orders_in(item, "paid");
    user_switch(true);
    assert_int_equal(paid_meanwhile, 0);
    WAIT_UNTIL(life_orders_in(item, "paid") == 1, 20000, ok);
    if (!ok)
        fail_msg("the payment did not pay its order once Redis was back; see %s", S.clog);
    assert_int_equal(harness_file_lines(S.clog, said), before + 1);
    WAIT_UNTIL(metric("seckill_consumer_payments_applied_total") == applied + 1, 5000, ok);
    assert_true(ok);
    assert_true(harness_over_count(S.clog, "payments: redis") >= 1);
    /* The buyers' status calls say so too, once Redis is back. */
    WAIT_UNTIL((redis_state(item, o, st, sizeof(st)), strstr(st, "|p|") != NULL), 10000, ok);
    if (!ok)
        fail_msg("Redis holds \"%s\" for the order paid once Redis was back; see %s", st, S.clog);

    /* Every payments session ended by the server (as a restart or a
     * failover would): the next payment is paid all the same. */
    assert_int_equal(harness_sh("cd '%s' && scripts/stack psql -d seckill -qAt -c \"SELECT count(pg_terminate_backend("
                                "pid)) FROM pg_stat_activity WHERE application_name = "
                                "'seckill-consumer-payments'\" >/dev/null",
                                harness_root()),
                     0);
    publish_payment(order_id(item, 1), u + 1, util_wall_ms(), "away-2");
    flush(S.pay);
    WAIT_UNTIL(life_orders_in(item, "paid") == 2, 20000, ok);
    if (!ok)
        fail_msg("no payment paid after PostgreSQL ended the session; see %s", S.clog);
    assert_true(harness_file_lines(S.clog, "payments: postgres") >= 1);
    /* Counted once the transaction has committed: a moment after the row
     * reads paid (CI saw the count one behind once). */
    WAIT_UNTIL(metric("seckill_consumer_payments_applied_total") == applied + 2, 5000, ok);
    assert_true(ok);
}

/* How many of item's orders Redis holds as paid ('p'), in one HGETALL. */
static int64_t redis_paid(int64_t item)
{
    char k[KEYS_MAX];
    int64_t n = 0;
    assert_true(keys_item(k, sizeof(k), harness_conf.redis.key_prefix, item, KEYS_ITEM_ORDERS) > 0);
    redisContext *rc = harness_redis(&harness_conf);
    redisReply *r = harness_cmd(rc, "HGETALL %s", k);
    for (size_t i = 1; r->type == REDIS_REPLY_ARRAY && i < r->elements; i += 2)
        n += strncmp(r->element[i - 1]->str, "o:", 2) == 0 && strstr(r->element[i]->str, "|p|") != NULL;
    freeReplyObject(r);
    redisFree(rc);
    return n;
}

/* Publish the burst's payment i with reference PREFIX-i, paid at paid_at,
 * by rk. */
static void publish_burst(rd_kafka_t *rk, int64_t item, int64_t first, int i, int64_t paid_at,
                          const char *prefix)
{
    char ref[32];
    snprintf(ref, sizeof(ref), "%s-%d", prefix, i);
    life_payment(rk, S.payments, order_id(item, i), first + i, paid_at, ref);
}

/* A burst of payments at once, as a sale's end brings (SECKILL_PAY_BURST,
 * default 400, at most 3000, sets its size): each order is paid once, by
 * its own payment (applied in batches, one transaction each), and marked
 * 'p' in Redis. The burst again, with a second payment for every tenth
 * order among it: no order changes, each replay is counted as one, each
 * second payment is recorded late once. Then the second payments again,
 * half of them beside as many third ones: a batch that holds late payments
 * recorded before and new ones tells them apart. Prints the rate and the
 * number of transactions that paid the burst (fewer than its payments). */
static void test_payment_burst(void **state)
{
    (void)state;
    const char *env = getenv("SECKILL_PAY_BURST");
    int n = env ? atoi(env) : 400, k;
    n = n < 20 ? 20 : n > 2000 ? 2000 : n; /* users up to S.user_lo + 2999 */
    k = n / 10;
    int64_t item = item_create(n, 600), first = S.user_lo + 1000, paid_at = util_wall_ms();
    int64_t applied = metric("seckill_consumer_payments_applied_total");
    int64_t replayed = metric("seckill_consumer_payments_replayed_total");
    int64_t late = metric("seckill_consumer_late_payments_total");
    bool ok;
    /* Its messages batched, so the burst reaches the broker at once, as a
     * payment service's would, and the time is the consumer's. */
    rd_kafka_t *rk = life_producer(&harness_conf, "payment", "50");
    orders_pending(item, first, n);
    int64_t t0 = util_mono_ms();
    for (int i = 0; i < n; i++)
        publish_burst(rk, item, first, i, paid_at, "burst");
    flush(rk);
    int64_t pub_ms = util_mono_ms() - t0;
    WAIT_UNTIL(life_orders_in(item, "paid") == n, 120000, ok);
    int64_t ms = util_mono_ms() - t0;
    if (!ok)
        fail_msg("%lld of %d orders paid; see %s", (long long)life_orders_in(item, "paid"), n, S.clog);
    /* In batches: a row's xmin is the transaction that paid it; one
     * payment per transaction would make as many as there are orders. */
    int64_t txns = life_pg_int("SELECT count(DISTINCT xmin::text) FROM orders WHERE item_id = $1", item);
    printf("# burst: %d payments paid in %lld ms (%.0f/s; published in %lld ms), in %lld transactions\n", n,
           (long long)ms, n * 1000.0 / (ms ? ms : 1), (long long)pub_ms, (long long)txns);
    assert_true(txns >= 1 && txns < n);
    /* Each by its own payment, at its time. */
    assert_int_equal(life_pg_int2("SELECT count(*) FROM orders WHERE item_id = $1 AND status = 'paid' AND "
                                  "status_reason = 'paid burst-' || (order_id - $2)",
                                  item, order_id(item, 0)),
                     n);
    assert_int_equal(life_pg_int2("SELECT count(*) FROM orders WHERE item_id = $1 AND status_changed_at = "
                                  "timestamptz 'epoch' + $2::bigint * interval '1 millisecond'",
                                  item, paid_at),
                     n);
    wait_metric("seckill_consumer_payments_applied_total", applied + n, "the burst");
    WAIT_UNTIL(redis_paid(item) == n, 10000, ok);
    if (!ok)
        fail_msg("Redis holds %lld of %d orders as paid; see %s", (long long)redis_paid(item), n, S.clog);

    /* The replay, with a second payment for every tenth order among it. */
    for (int i = 0; i < n; i++) {
        publish_burst(rk, item, first, i, paid_at + 1000, "burst");
        if (i % 10 == 0)
            publish_burst(rk, item, first, i, paid_at + 2000, "again");
    }
    flush(rk);
    wait_metric("seckill_consumer_payments_replayed_total", replayed + n, "the replay");
    wait_metric("seckill_consumer_late_payments_total", late + k, "the second payments");
    assert_int_equal(life_pg_int("SELECT count(*) FROM late_payments l JOIN orders o USING (order_id) WHERE "
                                 "o.item_id = $1 AND l.status_then = 'paid_other' AND l.ref LIKE 'again-%'",
                                 item),
                     k);

    /* The second payments again (half of them), beside new third ones. */
    for (int i = 0; i < n; i += 10)
        publish_burst(rk, item, first, i, paid_at + 3000, i % 20 == 0 ? "again" : "third");
    flush(rk);
    rd_kafka_destroy(rk);
    int again = (k + 1) / 2, third = k - again;
    wait_metric("seckill_consumer_late_payments_total", late + k + third, "the third payments");
    wait_metric("seckill_consumer_payments_replayed_total", replayed + n + again, "the second again");
    assert_int_equal(life_pg_int("SELECT count(*) FROM late_payments l JOIN orders o USING (order_id) WHERE "
                                 "o.item_id = $1 AND l.status_then = 'paid_other'",
                                 item),
                     k + third);

    /* Nothing changed: every order still paid by its first payment, at its
     * time, no unit back, counters exact. */
    assert_int_equal(life_pg_int2("SELECT count(*) FROM orders WHERE item_id = $1 AND status = 'paid' AND "
                                  "status_reason = 'paid burst-' || (order_id - $2)",
                                  item, order_id(item, 0)),
                     n);
    assert_int_equal(life_pg_int2("SELECT count(*) FROM orders WHERE item_id = $1 AND status_changed_at = "
                                  "timestamptz 'epoch' + $2::bigint * interval '1 millisecond'",
                                  item, paid_at),
                     n);
    assert_int_equal(life_pg_int("SELECT count(*) FROM order_returns WHERE item_id = $1", item), 0);
    assert_int_equal(life_stock_left(item), 0);
    assert_int_equal(metric("seckill_consumer_payments_applied_total"), applied + n);
    assert_int_equal(redis_paid(item), n);
}

/* A cancel of order, signed as the producer signs it, on the orders topic
 * keyed by its buyer. */
static void publish_cancel(int64_t order, int64_t user, int64_t item)
{
    struct order o = { order, user, item, 1, util_wall_ms(), ORDER_CANCEL, "" };
    char buf[ORDER_MSG_MAX], key[ORDER_ID_STR_MAX];
    assert_int_equal(osig_sign(&o), 0);
    int n = order_encode(&o, buf, sizeof(buf));
    assert_true(n > 0);
    snprintf(key, sizeof(key), "%" PRId64, user);
    life_produce(S.orders, S.topic, key, buf, (size_t)n);
}

/* Everything this run left in PostgreSQL and Redis, as one text: each
 * order's state, reason and time, each item's stock, each return, each
 * late payment; each item's Redis stock and orders hash. Caller frees. */
static char *run_state(void)
{
    char lo[24], hi[24], items[ARRAY_SIZE(S.items) * 24 + 2] = "{", *out = NULL;
    size_t len = 0;
    for (int i = 0; i < S.nitems; i++)
        snprintf(items + strlen(items), sizeof(items) - strlen(items), "%s%" PRId64, i ? "," : "", S.items[i]);
    strcat(items, "}");
    snprintf(lo, sizeof(lo), "%" PRId64, S.user_lo);
    snprintf(hi, sizeof(hi), "%" PRId64, S.user_hi);
    const char *p[] = { items, lo, hi };
    FILE *f = open_memstream(&out, &len);
    PGconn *pg = harness_pg(&harness_conf);
    PGresult *r = PQexecParams(
        pg,
        "SELECT (SELECT string_agg(concat_ws(' ', order_id, status, status_reason, status_changed_at, pay_by), "
        "'\n' ORDER BY order_id) FROM orders WHERE item_id = ANY($1::bigint[])), "
        "(SELECT string_agg(concat_ws(' ', item_id, stock_left), ',' ORDER BY item_id) FROM items "
        " WHERE item_id = ANY($1::bigint[])), "
        "(SELECT string_agg(concat_ws(' ', order_id, reason, created_at, tries, done_at), '\n' ORDER BY order_id) "
        " FROM order_returns WHERE item_id = ANY($1::bigint[])), "
        "(SELECT string_agg(concat_ws(' ', order_id, ref, status_then), '\n' ORDER BY order_id, ref) "
        " FROM late_payments WHERE user_id BETWEEN $2 AND $3)",
        3, NULL, p, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        fail_msg("the run's state: %s", PQerrorMessage(pg));
    for (int c = 0; c < 4; c++)
        fprintf(f, "%s\n--\n", PQgetvalue(r, 0, c));
    PQclear(r);
    PQfinish(pg);
    redisContext *rc = harness_redis(&harness_conf);
    for (int i = 0; i < S.nitems; i++) {
        char k[KEYS_MAX];
        fprintf(f, "item %" PRId64 ": stock %lld\n", S.items[i], redis_stock(S.items[i]));
        assert_true(keys_item(k, sizeof(k), harness_conf.redis.key_prefix, S.items[i], KEYS_ITEM_ORDERS) > 0);
        redisReply *h = harness_cmd(rc, "HGETALL %s", k);
        for (size_t j = 1; h->type == REDIS_REPLY_ARRAY && j < h->elements; j += 2)
            fprintf(f, "%s=%s\n", h->element[j - 1]->str, h->element[j]->str);
        freeReplyObject(h);
    }
    redisFree(rc);
    fclose(f);
    return out;
}

/* The first line where a and b differ, for the failure message. */
static void first_difference(const char *a, const char *b, char *out, size_t len)
{
    const char *la = a, *lb = b;
    while (*a && *a == *b) {
        if (*a == '\n')
            la = a + 1, lb = b + 1;
        a++, b++;
    }
    snprintf(out, len, "before: %.*s | after: %.*s", (int)strcspn(la, "\n"), la, (int)strcspn(lb, "\n"), lb);
}

/* An order's whole life, then a replay of both topics: a dozen orders, four
 * paid, four cancelled by their buyers, four left to expire (one of them
 * paid late). A second consumer in a group of its own then reads both
 * topics from their beginning, every order, cancel and payment of the run:
 * once it has committed both to their ends, nothing it or the stores hold
 * has changed, and it applied, inserted, returned and recorded nothing. */
static void test_replay_both_topics(void **state)
{
    (void)state;
    enum { N = 12 };
    int64_t item = item_create(N, 2), first = S.user_lo + 40;
    char ref[32], group[160], cfgpath[160], clog[192], bin[512], diff[512];
    bool ok;
    orders_pending(item, first, N);
    for (int i = 0; i < 4; i++) {
        snprintf(ref, sizeof(ref), "life-%d", i);
        publish_payment(order_id(item, i), first + i, util_wall_ms(), ref);
        publish_cancel(order_id(item, 4 + i), first + 4 + i, item);
    }
    flush(S.pay);
    flush(S.orders);
    WAIT_UNTIL(
        life_orders_in(item, "expired") == 4 &&
            life_pg_int("SELECT count(*) FROM order_returns WHERE item_id = $1 AND done_at IS NOT NULL",
                        item) == 8,
        20000, ok);
    if (!ok)
        fail_msg("paid %lld, cancelled %lld, expired %lld of 4 each; see %s",
                 (long long)life_orders_in(item, "paid"), (long long)life_orders_in(item, "cancelled"),
                 (long long)life_orders_in(item, "expired"), S.clog);
    assert_int_equal(life_orders_in(item, "paid"), 4);
    assert_int_equal(life_orders_in(item, "cancelled"), 4);
    publish_payment(order_id(item, 8), first + 8, util_wall_ms(), "late-8");
    flush(S.pay);
    WAIT_UNTIL(late_rows(order_id(item, 8), "expired") == 1, 15000, ok);
    assert_true(ok);
    assert_int_equal(life_stock_left(item), 8);
    /* (Its orders never took a unit from Redis: they were published here.) */
    assert_int_equal(redis_stock(item), N + 8);
    char *before = run_state();

    /* The second consumer: the suite's configuration in a group of its own. */
    struct cfg c2 = S.c;
    snprintf(group, sizeof(group), "%s-replay", S.c.consumer.group_id);
    c2.consumer.group_id = group;
    int port = c2.consumer.metrics_port = harness_free_port();
    harness_cfg_file(&c2, cfgpath, sizeof(cfgpath));
    snprintf(clog, sizeof(clog), "%s.consumer.log", cfgpath);
    harness_bin("seckill-consumer", bin, sizeof(bin));
    char *argv[] = { bin, "-c", cfgpath, NULL };
    pid_t pid = harness_spawn(argv, clog);
    char pgroup[200];
    snprintf(pgroup, sizeof(pgroup), "%s.payments", group);
    WAIT_UNTIL(sale_group_caught_up(&c2, group, S.topic) && sale_group_caught_up(&c2, pgroup, S.payments), 60000,
               ok);
    int64_t fetched = sale_metric(port, "seckill_consumer_consumed_total");
    int64_t changed = sale_metric(port, "seckill_consumer_persisted_total") +
                      sale_metric(port, "seckill_consumer_payments_applied_total") +
                      sale_metric(port, "seckill_consumer_late_payments_total") +
                      sale_metric(port, "seckill_consumer_cancels_total{result=\"applied\"}") +
                      sale_metric(port, "seckill_consumer_units_returned_total");
    int64_t replayed = sale_metric(port, "seckill_consumer_payments_replayed_total");
    kill(pid, SIGTERM);
    int st = harness_wait_exit(pid, 30000);
    if (!ok)
        fail_msg("the replaying consumer did not catch up with both topics; see %s", clog);
    assert_int_equal(st, 0);
    char *after = run_state();
    printf("# the replay read %lld orders and cancels, %lld payments again\n", (long long)fetched,
           (long long)replayed);
    if (strcmp(before, after) != 0) {
        first_difference(before, after, diff, sizeof(diff));
        fail_msg("the replay changed the stores: %s; see %s", diff, clog);
    }
    assert_true(fetched >= N + 4);
    assert_true(replayed >= 4);
    assert_int_equal(changed, 0);
    free(before);
    free(after);
    unlink(cfgpath);
    unlink(clog);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_payment_user_writes_payments_only),
        cmocka_unit_test(test_pay_then_replay),
        cmocka_unit_test(test_late_payment_of_expired_order),
        cmocka_unit_test(test_payments_race_the_expiry),
        cmocka_unit_test(test_dead_letters_and_early_payments),
        cmocka_unit_test(test_payment_refused_as_data_dead_lettered),
        cmocka_unit_test(test_forged_payments),
        cmocka_unit_test(test_payment_key_rotation),
        cmocka_unit_test(test_never_issued_ids_refused_at_once),
        cmocka_unit_test(test_late_payments_logged_once),
        cmocka_unit_test(test_waiting_set_full),
        cmocka_unit_test(test_unknown_payments_hold_back_none),
        cmocka_unit_test(test_payment_waits_out_redis_and_postgres),
        cmocka_unit_test(test_payment_burst),
        cmocka_unit_test(test_replay_both_topics),
    };
    harness_filter();
    return cmocka_run_group_tests_name("payments", tests, setup, teardown);
}
