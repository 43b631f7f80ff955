/* The buyer's cancel call (issue #44, item 3) against the stack, over real
 * HTTP: POST /api/v1/orders/{id}/cancel with the buyer's token.
 *
 * One producer (producer.auth = "jwt") on a topic and a Redis key prefix of
 * its own, and no consumer (but in the last test, to decide a cancel): an
 * order stays queued in Redis, and the states
 * after the sale are written into the item's orders hash as seckill_mark
 * writes them (consumer/lua/seckill_return.lua), as the stack's admin user.
 * The cancels the producer publishes are read back from the topic and
 * checked as a consumer would: the order's ids, "type":"cancel", a sig a
 * producer key made, keyed by the user, after the order it cancels. Every
 * test makes its own items, removed from PostgreSQL at the end. */
#include "harness.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "keys.h"
#include "life.h"
#include "order.h"
#include "ordersig.h"
#include "sale.h"

#define PARTS 4
#define MAX_ITEMS 16
#define MAX_MSGS 256

struct rt {
    struct cfg c;
    char cfgpath[128];
    char plog[192], clog[192];
    int port, mport;
    pid_t producer, consumer;
    int64_t items[MAX_ITEMS];
    int nitems;
};

static struct rt R;

/* --- raw HTTP --------------------------------------------------------------- */

/* One request on a fresh connection (Connection: close), read to the end:
 * hdrs more header lines (each ended by CRLF) or NULL, then body or NULL. */
static int http_req(const char *method, const char *path, const char *authz, const char *hdrs,
                    const char *body, struct life_resp *r)
{
    char req[4096];
    int n = snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s%s%s%s\r\n%s",
                     method, path, authz ? "Authorization: " : "", authz ? authz : "", authz ? "\r\n" : "",
                     hdrs ? hdrs : "", body ? body : "");
    if (n <= 0 || (size_t)n >= sizeof(req))
        return life_http_on(-1, req, 0, r); /* no answer */
    return life_http_raw(R.port, req, (size_t)n, r);
}

static void bearer(int64_t user, char *out, size_t len)
{
    char tok[1024];
    harness_token(&R.c, user, tok, sizeof(tok));
    snprintf(out, len, "Bearer %s", tok);
}

/* POST a buy of item as user: the order id of its 202. */
static int64_t buy(int64_t user, int64_t item)
{
    char authz[1100], hdrs[96], body[64], v[32];
    struct life_resp r;
    bearer(user, authz, sizeof(authz));
    snprintf(body, sizeof(body), "{\"item_id\":%" PRId64 "}", item);
    snprintf(hdrs, sizeof(hdrs), "Content-Type: application/json\r\nContent-Length: %zu\r\n", strlen(body));
    if (http_req("POST", "/api/v1/seckill", authz, hdrs, body, &r) != 202 ||
        !life_json_str(r.body, "order_id", v, sizeof(v)))
        fail_msg("buy: want 202 with an order id, got %d: %s", r.status, r.body);
    return strtoll(v, NULL, 10);
}

/* method /api/v1/orders/{oid}/cancel as user (0: no token). */
static int cancel_as(const char *method, int64_t oid, int64_t user, const char *hdrs, const char *body,
                     struct life_resp *r)
{
    char authz[1100], path[96];
    if (user)
        bearer(user, authz, sizeof(authz));
    snprintf(path, sizeof(path), "/api/v1/orders/%" PRId64 "/cancel", oid);
    return http_req(method, path, user ? authz : NULL, hdrs, body, r);
}

/* The usual cancel: POST with an empty body. */
static int cancel(int64_t oid, int64_t user, struct life_resp *r)
{
    return cancel_as("POST", oid, user, "Content-Length: 0\r\n", NULL, r);
}

static void expect(const struct life_resp *r, int code, const char *word)
{
    char st[64];
    if (r->status != code || !life_json_str(r->body, "status", st, sizeof(st)) || strcmp(st, word) != 0)
        fail_msg("want %d \"%s\", got %d: %s", code, word, r->status, r->body);
}

static int64_t metric(const char *name)
{
    return sale_metric(R.mport, name);
}

/* --- the pipeline ------------------------------------------------------------ */

static int healthz(void)
{
    return harness_http(R.port, "GET", "/healthz", NULL, NULL, NULL, 0);
}

static int setup(void **state)
{
    char rnd[9], *s, err[256], bin[512];
    bool ok;
    (void)state;
    memset(&R, 0, sizeof(R));
    harness_cfg(&R.c); /* a Redis key prefix of its own */
    assert_int_equal(util_random_hex(rnd, 4), 0);
    assert_true(asprintf(&s, "sktest.cancelapi.%d.%s", (int)getpid(), rnd) > 0);
    free(R.c.kafka.topic);
    R.c.kafka.topic = s;
    /* a consumer of its own for the test that starts one, payments
     * included: it reads no other run's */
    assert_true(asprintf(&s, "%s.dlq", R.c.kafka.topic) > 0);
    free(R.c.kafka.dlq_topic);
    R.c.kafka.dlq_topic = s;
    assert_true(asprintf(&s, "%s.payments", R.c.kafka.topic) > 0);
    free(R.c.kafka.payments_topic);
    R.c.kafka.payments_topic = s;
    assert_true(asprintf(&s, "sktest-cancelapi-%d-%s", (int)getpid(), rnd) > 0);
    free(R.c.consumer.group_id);
    R.c.consumer.group_id = s;
    R.c.consumer.metrics_port = 0;
    harness_producer_ports(&R.c);
    R.port = R.c.producer.port;
    R.mport = R.c.producer.metrics_port;
    R.c.producer.auth = CFG_AUTH_JWT;
    R.c.producer.connection_timeout_s = 5;
    harness_props_set(&R.c.kafka.producer_properties, "message.timeout.ms", "5000");
    harness_cfg_file(&R.c, R.cfgpath, sizeof(R.cfgpath));
    snprintf(R.plog, sizeof(R.plog), "%s.producer.log", R.cfgpath);
    snprintf(R.clog, sizeof(R.clog), "%s.consumer.log", R.cfgpath);
    /* The producer's order keys, to check its sigs as a consumer does. */
    if (osig_load(&R.c, err, sizeof(err)) != 0) {
        print_error("order keys: %s\n", err);
        return -1;
    }
    if (harness_topic_create(&R.c, R.c.kafka.topic, PARTS) != 0 ||
        harness_topic_create(&R.c, R.c.kafka.dlq_topic, 1) != 0 ||
        harness_topic_create(&R.c, R.c.kafka.payments_topic, PARTS) != 0)
        return -1;
    harness_bin("seckill-producer", bin, sizeof(bin));
    char *argv[] = { bin, "-c", R.cfgpath, NULL };
    R.producer = harness_spawn(argv, R.plog);
    WAIT_UNTIL(healthz() == 200, 30000, ok);
    if (!ok) {
        print_error("producer did not come up; see %s\n", R.plog);
        return -1;
    }
    return 0;
}

/* SIGTERM: a clean stop exits 0 (said, not asserted: teardown's too). */
static int daemon_stop(pid_t *pid, const char *log)
{
    int st = 0;
    if (*pid > 0) {
        kill(*pid, SIGTERM);
        if ((st = harness_wait_exit(*pid, 30000)) != 0)
            print_error("exit status %d after SIGTERM; see %s\n", st, log);
    }
    *pid = 0;
    return st;
}

static int teardown(void **state)
{
    (void)state;
    daemon_stop(&R.producer, R.plog);
    daemon_stop(&R.consumer, R.clog);
    /* what the consumer persisted of every test's orders, then the items */
    static const char *const drop[] = {
        "DELETE FROM order_returns WHERE item_id = $1",
        "DELETE FROM order_deadlines WHERE order_id IN (SELECT order_id FROM orders WHERE item_id = $1)",
        "DELETE FROM late_payments WHERE order_id IN (SELECT order_id FROM orders WHERE item_id = $1)",
        "DELETE FROM orders WHERE item_id = $1", "DELETE FROM order_rejections WHERE item_id = $1",
        "DELETE FROM items WHERE item_id = $1",
    };
    for (int i = 0; i < R.nitems; i++)
        for (size_t d = 0; d < sizeof(drop) / sizeof(drop[0]); d++)
            harness_pg_try(&R.c, drop[d], R.items[i], 0);
    harness_topic_delete(&R.c, R.c.kafka.topic);
    harness_topic_delete(&R.c, R.c.kafka.dlq_topic);
    harness_topic_delete(&R.c, R.c.kafka.payments_topic);
    if (!getenv("SECKILL_TEST_KEEP_LOGS")) {
        unlink(R.plog);
        unlink(R.clog);
        unlink(R.cfgpath);
    }
    harness_redis_drop(&R.c);
    osig_unload();
    cfg_free(&R.c);
    return 0;
}

static int64_t item_new(void)
{
    int64_t item = 950000000000LL + (int64_t)util_rand_below(9999999999ULL);
    assert_true(R.nitems < MAX_ITEMS);
    R.items[R.nitems++] = item;
    return harness_item_create(R.cfgpath, item, 10);
}

/* An item whose buyers have pay_s seconds to pay (item create --pay-within). */
static int64_t item_new_paying(int pay_s)
{
    char ctl[512], id[24], pay[24];
    int64_t item = 950000000000LL + (int64_t)util_rand_below(9999999999ULL);
    assert_true(R.nitems < MAX_ITEMS);
    R.items[R.nitems++] = item;
    harness_bin("seckillctl", ctl, sizeof(ctl));
    snprintf(id, sizeof(id), "%" PRId64, item);
    snprintf(pay, sizeof(pay), "%d", pay_s);
    char *argv[] = { ctl, "-c", R.cfgpath, "item", "create", "--id", id, "--stock", "10", "--pay-within", pay, NULL };
    assert_int_equal(harness_wait_exit(harness_spawn(argv, "/dev/null"), 30000), 0);
    return item;
}

static int64_t user_new(void)
{
    return 400000000000LL + (int64_t)util_rand_below(99999999999ULL);
}

/* --- the orders hash ---------------------------------------------------------- */

/* Set order oid's state in item's orders hash as seckill_mark writes it:
 * "user|S|reserved|settled|detail", S and detail given, the rest kept. */
static void order_mark(int64_t item, int64_t oid, char st, const char *settled, const char *detail)
{
    char key[KEYS_MAX], user[24], rsv[24], val[160];
    redisContext *rc = harness_redis(&R.c);
    keys_item(key, sizeof(key), R.c.redis.key_prefix, item, KEYS_ITEM_ORDERS);
    redisReply *r = harness_cmd(rc, "HGET %s o:%lld", key, (long long)oid);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_int_equal(sscanf(r->str, "%23[0-9]|%*c|%23[0-9]|", user, rsv), 2);
    freeReplyObject(r);
    snprintf(val, sizeof(val), "%s|%c|%s|%s|%s", user, st, rsv, settled, detail);
    r = harness_cmd(rc, "HSET %s o:%lld %s", key, (long long)oid, val);
    freeReplyObject(r);
    redisFree(rc);
}

/* --- the topic ------------------------------------------------------------------ */

struct msg {
    struct order o;
    char key[32];
    int32_t partition;
    int64_t offset;
};

/* Every message of the test's topic, from the start to its end now. */
static int topic_read(struct msg *out, int max)
{
    char err[512];
    rd_kafka_conf_t *conf = harness_kafka_conf(&R.c, "admin");
    assert_int_equal(rd_kafka_conf_set(conf, "group.id", "seckill-test-cancelapi", err, sizeof(err)),
                     RD_KAFKA_CONF_OK);
    assert_int_equal(rd_kafka_conf_set(conf, "enable.auto.commit", "false", err, sizeof(err)), RD_KAFKA_CONF_OK);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
    assert_non_null(rk);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(PARTS);
    int64_t end[PARTS], lo;
    int done = 0, n = 0;
    for (int p = 0; p < PARTS; p++) {
        assert_int_equal(rd_kafka_query_watermark_offsets(rk, R.c.kafka.topic, p, &lo, &end[p], 10000),
                         RD_KAFKA_RESP_ERR_NO_ERROR);
        rd_kafka_topic_partition_list_add(l, R.c.kafka.topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
        if (end[p] == 0)
            done++;
    }
    assert_int_equal(rd_kafka_assign(rk, l), RD_KAFKA_RESP_ERR_NO_ERROR);
    int64_t deadline = util_mono_ms() + 30000;
    while (done < PARTS && util_mono_ms() < deadline) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
        if (!m)
            continue;
        if (!m->err && n < max) {
            struct msg *x = &out[n];
            if (order_decode(m->payload, m->len, &x->o, err, sizeof(err)) != 0)
                fail_msg("a message the producer wrote does not decode: %s", err);
            snprintf(x->key, sizeof(x->key), "%.*s", (int)m->key_len, (const char *)m->key);
            x->partition = m->partition;
            x->offset = m->offset;
            n++;
        }
        if (!m->err && m->offset + 1 >= end[m->partition])
            done++;
        rd_kafka_message_destroy(m);
    }
    assert_int_equal(done, PARTS);
    rd_kafka_topic_partition_list_destroy(l);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return n;
}

/* The messages of order oid of kind k in msgs (the last one into *at). */
static int count_of(const struct msg *msgs, int n, int64_t oid, int64_t k, const struct msg **at)
{
    int c = 0;
    for (int i = 0; i < n; i++)
        if (msgs[i].o.order_id == oid && msgs[i].o.kind == k) {
            c++;
            *at = &msgs[i];
        }
    return c;
}

/* Exactly one cancel of oid (user's, item's) on the topic, as a consumer
 * checks it, after the order itself in the same partition. */
static void expect_cancel_published(int64_t oid, int64_t user, int64_t item)
{
    static struct msg msgs[MAX_MSGS];
    const struct msg *ord = NULL, *cx = NULL;
    char err[128], key[24];
    int n = topic_read(msgs, MAX_MSGS);
    assert_int_equal(count_of(msgs, n, oid, ORDER_BUY, &ord), 1);
    if (count_of(msgs, n, oid, ORDER_CANCEL, &cx) != 1)
        fail_msg("order %" PRId64 ": want one cancel on the topic", oid);
    assert_int_equal(cx->o.user_id, user);
    assert_int_equal(cx->o.item_id, item);
    assert_int_equal(cx->o.qty, 1);
    assert_true(cx->o.reserved_at_ms >= ord->o.reserved_at_ms);
    if (osig_verify(&cx->o, err, sizeof(err)) != KEYRING_OK)
        fail_msg("cancel of order %" PRId64 ": %s", oid, err);
    /* Keyed by the user, as the order: same partition, after it. */
    snprintf(key, sizeof(key), "%" PRId64, user);
    assert_string_equal(cx->key, key);
    assert_int_equal(cx->partition, ord->partition);
    assert_true(cx->offset > ord->offset);
    /* The sig is a cancel's: the same ids as an order do not verify. */
    struct order as_buy = cx->o;
    as_buy.kind = ORDER_BUY;
    assert_int_not_equal(osig_verify(&as_buy, err, sizeof(err)), KEYRING_OK);
}

/* No cancel of oid on the topic. */
static void expect_no_cancel(int64_t oid)
{
    static struct msg msgs[MAX_MSGS];
    const struct msg *cx = NULL;
    int n = topic_read(msgs, MAX_MSGS);
    assert_int_equal(count_of(msgs, n, oid, ORDER_CANCEL, &cx), 0);
}

/* --- tests ------------------------------------------------------------------------ */

/* A queued order: 202 cancelling once Kafka has it, and the message is a
 * consumer's to trust. */
static void test_cancel_queued(void **state)
{
    (void)state;
    int64_t item = item_new(), user = user_new(), oid = buy(user, item);
    int64_t before = metric("seckill_producer_cancels_accepted_total");
    struct life_resp r;
    char v[32];
    assert_int_equal(cancel(oid, user, &r), 202);
    expect(&r, 202, "cancelling");
    assert_true(life_json_str(r.body, "order_id", v, sizeof(v)));
    assert_int_equal(strtoll(v, NULL, 10), oid);
    expect_cancel_published(oid, user, item);
    assert_int_equal(metric("seckill_producer_cancels_accepted_total"), before + 1);
}

/* An order waiting for its payment: the same. Without a body at all
 * (chunked, no chunk) too. */
static void test_cancel_pending_payment(void **state)
{
    (void)state;
    int64_t item = item_new(), user = user_new(), oid = buy(user, item);
    struct life_resp r;
    char now[24], pay_by[24];
    snprintf(now, sizeof(now), "%" PRId64, util_wall_ms());
    snprintf(pay_by, sizeof(pay_by), "%" PRId64, util_wall_ms() + 900000);
    order_mark(item, oid, 'w', now, pay_by);
    assert_int_equal(cancel_as("POST", oid, user, "Transfer-Encoding: chunked\r\n", "0\r\n\r\n", &r), 202);
    expect(&r, 202, "cancelling");
    expect_cancel_published(oid, user, item);
}

/* Another buyer's order answers exactly like one that does not exist, and
 * like the status call's 404; nothing is published. */
static void test_cancel_not_owner(void **state)
{
    (void)state;
    int64_t item = item_new(), user = user_new(), other = user + 1, oid = buy(user, item);
    int64_t before = metric("seckill_producer_cancels_refused_total{reason=\"not_found\"}");
    struct life_resp mine, missing, status;
    char path[64], authz[1100];
    assert_int_equal(cancel(oid, other, &mine), 404);
    assert_int_equal(cancel(oid + 999983, other, &missing), 404);
    bearer(other, authz, sizeof(authz));
    snprintf(path, sizeof(path), "/api/v1/orders/%" PRId64, oid + 999983);
    assert_int_equal(http_req("GET", path, authz, NULL, NULL, &status), 404);
    assert_string_equal(mine.body, "{\"status\":\"not_found\"}");
    assert_string_equal(missing.body, mine.body);
    assert_string_equal(status.body, mine.body);
    assert_int_equal(metric("seckill_producer_cancels_refused_total{reason=\"not_found\"}"), before + 2);
    expect_no_cancel(oid);
}

/* What cannot be cancelled answers 409 with the order as the status call
 * describes it; a cancelled one 202 again; nothing is published. */
static void test_cancel_states(void **state)
{
    (void)state;
    int64_t item = item_new(), user = user_new();
    struct life_resp r;
    char v[48];
    /* times as the consumer would write them (set per order below):
     * persisted now, then paid, expired or cancelled within the window */
    char now[24], paid_at[24], pay_by[24], cancelled_at[24];
    const struct {
        char st;
        const char *settled, *detail;
        int http;
        const char *word, *field;
    } cases[] = {
        { 'p', now, paid_at, 409, "paid", "paid_at" },
        { 'x', now, pay_by, 409, "expired", "expired_at" },
        { 'r', now, "no_stock", 409, "refused", "refused_at" },
        { 'c', now, "", 409, "final", "persisted_at" },
        { 'k', now, cancelled_at, 202, "cancelled", "cancelled_at" },
    };
    int64_t oids[5], repeated = metric("seckill_producer_cancels_repeated_total");
    int64_t paid = metric("seckill_producer_cancels_refused_total{reason=\"paid\"}");
    int64_t accepted = metric("seckill_producer_cancels_accepted_total");
    for (size_t i = 0; i < 5; i++) {
        oids[i] = buy(user + (int64_t)i, item);
        int64_t t = util_wall_ms();
        snprintf(now, sizeof(now), "%" PRId64, t);
        snprintf(paid_at, sizeof(paid_at), "%" PRId64, t + 60000);
        snprintf(pay_by, sizeof(pay_by), "%" PRId64, t + 900000);
        snprintf(cancelled_at, sizeof(cancelled_at), "%" PRId64, t + 120000);
        order_mark(item, oids[i], cases[i].st, cases[i].settled, cases[i].detail);
        assert_int_equal(cancel(oids[i], user + (int64_t)i, &r), cases[i].http);
        expect(&r, cases[i].http, cases[i].word);
        if (!life_json_str(r.body, cases[i].field, v, sizeof(v)))
            fail_msg("%s: no %s in %s", cases[i].word, cases[i].field, r.body);
    }
    /* a second cancel of the cancelled one: 202 again */
    assert_int_equal(cancel(oids[4], user + 4, &r), 202);
    expect(&r, 202, "cancelled");
    assert_int_equal(metric("seckill_producer_cancels_repeated_total"), repeated + 2);
    assert_int_equal(metric("seckill_producer_cancels_refused_total{reason=\"paid\"}"), paid + 1);
    assert_int_equal(metric("seckill_producer_cancels_accepted_total"), accepted);
    for (size_t i = 0; i < 5; i++)
        expect_no_cancel(oids[i]);
}

/* The status call's word for oid as user is want. */
static bool status_is(int64_t oid, int64_t user, const char *want)
{
    char authz[1100], path[64], st[32];
    struct life_resp r;
    bearer(user, authz, sizeof(authz));
    snprintf(path, sizeof(path), "/api/v1/orders/%" PRId64, oid);
    return http_req("GET", path, authz, NULL, NULL, &r) == 200 && life_json_str(r.body, "status", st, sizeof(st)) &&
           strcmp(st, want) == 0;
}

/* An order persisted ("confirmed": 'c') of an item with a payment window,
 * as a failover between the consumer's settle and its mark 'w' leaves it
 * (issue #55): not known final, so the cancel is published as for an order
 * pending payment (202), and the consumer decides. PostgreSQL persists the
 * order pending payment, so the cancel cancels it. (An item without a
 * window answers 409 final: test_cancel_states.) */
static void test_cancel_settled_with_window(void **state)
{
    (void)state;
    int64_t item = item_new_paying(900), user = user_new(), oid = buy(user, item);
    int64_t accepted = metric("seckill_producer_cancels_accepted_total");
    struct life_resp r;
    char now[24], key[KEYS_MAX], bin[512];
    bool ok;
    /* what tells the producer: item create wrote the payment window into
     * the item's window hash */
    redisContext *rc = harness_redis(&R.c);
    keys_item(key, sizeof(key), R.c.redis.key_prefix, item, KEYS_ITEM_WINDOW);
    redisReply *w = harness_cmd(rc, "HGET %s %s", key, KEYS_WINDOW_PAY);
    assert_int_equal(w->type, REDIS_REPLY_STRING);
    assert_string_equal(w->str, "900");
    freeReplyObject(w);
    redisFree(rc);

    snprintf(now, sizeof(now), "%" PRId64, util_wall_ms());
    order_mark(item, oid, 'c', now, "");
    assert_int_equal(cancel(oid, user, &r), 202);
    expect(&r, 202, "cancelling");
    expect_cancel_published(oid, user, item);
    assert_int_equal(metric("seckill_producer_cancels_accepted_total"), accepted + 1);

    /* The consumer decides: it persists the order pending payment, then
     * applies the cancel after it (the same partition). */
    harness_bin("seckill-consumer", bin, sizeof(bin));
    char *argv[] = { bin, "-c", R.cfgpath, NULL };
    R.consumer = harness_spawn(argv, R.clog);
    WAIT_UNTIL(status_is(oid, user, "cancelled"), 60000, ok);
    if (!ok)
        fail_msg("order %" PRId64 " not cancelled by the consumer; see %s", oid, R.clog);
    PGconn *pg = harness_pg(&R.c);
    char id[24];
    snprintf(id, sizeof(id), "%" PRId64, oid);
    const char *params[] = { id };
    PGresult *res = PQexecParams(pg, "SELECT status FROM orders WHERE order_id = $1", 1, NULL, params, NULL, NULL, 0);
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(res), 1);
    assert_string_equal(PQgetvalue(res, 0, 0), "cancelled");
    PQclear(res);
    PQfinish(pg);
    assert_int_equal(daemon_stop(&R.consumer, R.clog), 0);
}

/* The path and method as strict as the status call's; the token needed. */
static void test_cancel_http(void **state)
{
    (void)state;
    int64_t item = item_new(), user = user_new(), oid = buy(user, item);
    struct life_resp r;
    char authz[1100], allow[64], path[96];
    assert_int_equal(cancel_as("GET", oid, user, NULL, NULL, &r), 405);
    assert_true(life_resp_header(&r, "Allow", allow, sizeof(allow)));
    assert_string_equal(allow, "POST");
    assert_int_equal(cancel_as("HEAD", oid, user, NULL, NULL, &r), 405);
    assert_int_equal(cancel_as("PUT", oid, user, "Content-Length: 0\r\n", NULL, &r), 405);
    /* the status path's 405 names its methods too */
    snprintf(path, sizeof(path), "/api/v1/orders/%" PRId64, oid);
    bearer(user, authz, sizeof(authz));
    assert_int_equal(http_req("POST", path, authz, "Content-Length: 0\r\n", NULL, &r), 405);
    assert_true(life_resp_header(&r, "Allow", allow, sizeof(allow)));
    assert_string_equal(allow, "GET, HEAD");
    /* ids as the status path takes them: anything else is 400 */
    static const char *bad[] = { "/api/v1/orders/0/cancel",   "/api/v1/orders/01/cancel",
                                 "/api/v1/orders/%31/cancel", "/api/v1/orders/-1/cancel",
                                 "/api/v1/orders//cancel",    "/api/v1/orders/1/2/cancel",
                                 "/api/v1/orders/1/cancel/",  "/api/v1/orders/99999999999999999999/cancel" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (http_req("POST", bad[i], authz, "Content-Length: 0\r\n", NULL, &r) != 400)
            fail_msg("POST %s: want 400, got %d: %s", bad[i], r.status, r.body);
    /* not the cancel path: no resource */
    snprintf(path, sizeof(path), "/api/v1/orders/%" PRId64 "/cancel%%2F", oid);
    assert_int_equal(http_req("POST", path, authz, "Content-Length: 0\r\n", NULL, &r), 400);
    snprintf(path, sizeof(path), "/api/v1/orders/%" PRId64 "/cance%%6C", oid);
    assert_int_equal(http_req("POST", path, authz, "Content-Length: 0\r\n", NULL, &r), 400);
    /* the order is the path's: a body is refused, whole or chunked */
    assert_int_equal(cancel_as("POST", oid, user, "Content-Length: 2\r\n", "{}", &r), 400);
    expect(&r, 400, "bad_request");
    assert_int_equal(cancel_as("POST", oid, user, "Transfer-Encoding: chunked\r\n", "2\r\n{}\r\n0\r\n\r\n", &r),
                     400);
    /* no token, a bad token */
    assert_int_equal(cancel(oid, 0, &r), 401);
    snprintf(path, sizeof(path), "/api/v1/orders/%" PRId64 "/cancel", oid);
    assert_int_equal(http_req("POST", path, "Bearer x.y.z", "Content-Length: 0\r\n", NULL, &r), 401);
    /* unknown id: 404 */
    assert_int_equal(cancel(oid + 7777777, user, &r), 404);
    expect_no_cancel(oid);
    /* and the order can still be cancelled: none of these touched it */
    assert_int_equal(cancel(oid, user, &r), 202);
    expect(&r, 202, "cancelling");
}

/* A producer of the same Redis whose Kafka never takes a cancel (its topic
 * does not exist): the cancel is answered 503 once Kafka said it was not
 * persisted, and nothing is sent again; the order stays cancellable. */
static void test_cancel_publish_fails(void **state)
{
    (void)state;
    struct cfg c;
    char cfgpath[128], log[192], bin[512];
    struct life_resp r;
    bool ok;
    int64_t item = item_new(), user = user_new(), oid = buy(user, item);
    harness_cfg(&c);
    harness_set_str(&c.redis.key_prefix, R.c.redis.key_prefix);
    harness_set_str(&c.kafka.topic, "sktest.cancelapi.no-such-topic");
    harness_producer_ports(&c);
    c.producer.auth = CFG_AUTH_JWT;
    harness_props_set(&c.kafka.producer_properties, "message.timeout.ms", "1000");
    harness_cfg_file(&c, cfgpath, sizeof(cfgpath));
    snprintf(log, sizeof(log), "%s.producer.log", cfgpath);
    harness_bin("seckill-producer", bin, sizeof(bin));
    char *argv[] = { bin, "-c", cfgpath, NULL };
    pid_t pid = harness_spawn(argv, log);
    /* up, though Kafka is "down" for it: /healthz answers at all */
    WAIT_UNTIL(harness_http(c.producer.port, "GET", "/healthz", NULL, NULL, NULL, 0) > 0, 30000, ok);
    if (!ok)
        fail_msg("producer did not come up; see %s", log);
    int main_port = R.port;
    R.port = c.producer.port;
    cancel(oid, user, &r);
    R.port = main_port;
    int64_t errs = sale_metric(c.producer.metrics_port,
                               "seckill_producer_cancel_publish_errors_total{kind=\"not_persisted\"}");
    int64_t refused = sale_metric(c.producer.metrics_port,
                                  "seckill_producer_cancels_refused_total{reason=\"unavailable\"}");
    kill(pid, SIGTERM);
    harness_wait_exit(pid, 30000);
    if (!getenv("SECKILL_TEST_KEEP_LOGS")) {
        unlink(log);
        unlink(cfgpath);
    }
    cfg_free(&c);
    assert_int_equal(r.status, 503);
    assert_string_equal(r.body, "{\"status\":\"unavailable\"}");
    assert_int_equal(errs, 1);
    assert_int_equal(refused, 1);
    /* Kafka never had it; the order is still there to cancel, once. */
    assert_int_equal(cancel(oid, user, &r), 202);
    expect(&r, 202, "cancelling");
    expect_cancel_published(oid, user, item);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cancel_queued),  cmocka_unit_test(test_cancel_pending_payment),
        cmocka_unit_test(test_cancel_not_owner), cmocka_unit_test(test_cancel_states),
        cmocka_unit_test(test_cancel_http),    cmocka_unit_test(test_cancel_publish_fails),
        /* last: its consumer persists every test's orders */
        cmocka_unit_test(test_cancel_settled_with_window),
    };
    harness_filter();
    return cmocka_run_group_tests(tests, setup, teardown);
}
