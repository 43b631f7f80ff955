/* Recovery and inspection against the stack: the consumer's --replay,
 * seckillctl reconcile (clean, corrupted, --fix), item load after Redis lost
 * an item mid-sale, and inspect.
 *
 * Each test has a topic, a consumer group and items of its own. */
#include "harness.h"

#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "keys.h"
#include "order.h"
#include "ordersig.h"
#include "sale.h"

#define PARTS 4

struct rt {
    struct cfg c;        /* producer, consumer and seckillctl share it */
    char cfgpath[128];
    char dlq[160];
    pid_t producer, consumer;
    char plog[160], clog[160];
    int port;
    PGconn *pg;
    rd_kafka_t *kp;      /* the test's own producer, for raw messages */
};

/* --- small tools ----------------------------------------------------------- */

#define sh_ok(...)                                                      \
    do {                                                                \
        if (harness_sh(__VA_ARGS__) != 0)                               \
            fail_msg("command failed: %s", #__VA_ARGS__);               \
    } while (0)

static int run(char **out, const char *bin, const char *const *args)
{
    return harness_run(out, bin, args, 120000);
}

static int ctl(struct rt *t, char **out, const char *a1, const char *a2, const char *a3, const char *a4,
               const char *a5, const char *a6)
{
    const char *args[] = { "-c", t->cfgpath, a1, a2, a3, a4, a5, a6, NULL };
    return run(out, "seckillctl", args);
}

static int64_t pg_i64(struct rt *t, const char *sql, int64_t arg)
{
    char a[24];
    snprintf(a, sizeof(a), "%" PRId64, arg);
    const char *p[] = { a };
    PGresult *r = PQexecParams(t->pg, sql, 1, NULL, p, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK && PQresultStatus(r) != PGRES_COMMAND_OK)
        fail_msg("%s: %s", sql, PQerrorMessage(t->pg));
    int64_t v = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) && !PQgetisnull(r, 0, 0)
                    ? strtoll(PQgetvalue(r, 0, 0), NULL, 10)
                    : -1;
    PQclear(r);
    return v;
}

/* The item's orders as one checksum over what an order is (not when it was
 * written or under which fence), in order id order. */
static char *orders_digest(struct rt *t, int64_t item)
{
    char a[24];
    snprintf(a, sizeof(a), "%" PRId64, item);
    const char *p[] = { a };
    PGresult *r = PQexecParams(t->pg,
                               "SELECT count(*) || ':' || coalesce(md5(string_agg(order_id || '/' || user_id || '/' "
                               "|| item_id || '/' || qty || '/' || reserved_at, ',' ORDER BY order_id)), '-') "
                               "FROM orders WHERE item_id = $1",
                               1, NULL, p, NULL, NULL, 0);
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    char *d = strdup(PQgetvalue(r, 0, 0));
    PQclear(r);
    return d;
}

static redisContext *redis(struct rt *t)
{
    return harness_redis(&t->c);
}

static void item_key(struct rt *t, int64_t item, enum keys_item_part part, char *k)
{
    assert_true(keys_item(k, KEYS_MAX, t->c.redis.key_prefix, item, part) > 0);
}

static int64_t new_item_id(void)
{
    return 700000000000LL + (int64_t)util_rand_below(99999999999ULL);
}

/* --- the pipeline ------------------------------------------------------------ */

static void rt_init(struct rt *t, const char *tag)
{
    char rnd[9];
    memset(t, 0, sizeof(*t));
    harness_cfg(&t->c);
    assert_int_equal(util_random_hex(rnd, 4), 0);
    free(t->c.kafka.topic);
    assert_true(asprintf(&t->c.kafka.topic, "sktest.%s.%d.%s", tag, (int)getpid(), rnd) > 0);
    snprintf(t->dlq, sizeof(t->dlq), "%s.dlq", t->c.kafka.topic);
    free(t->c.kafka.dlq_topic);
    t->c.kafka.dlq_topic = strdup(t->dlq);
    free(t->c.consumer.group_id);
    assert_true(asprintf(&t->c.consumer.group_id, "sktest-%s-%d-%s", tag, (int)getpid(), rnd) > 0);
    t->c.consumer.metrics_port = 0;
    t->c.consumer.workers = 2;
    t->c.consumer.batch_size = 100;
    harness_producer_ports(&t->c);
    t->port = t->c.producer.port;
    t->c.producer.sweep_age_ms = 1000;
    t->c.producer.sweep_interval_ms = 200;
    t->c.producer.connection_timeout_s = 2;
    /* Short delivery window: item load waits 2 x this + 2 s. */
    harness_props_set(&t->c.kafka.producer_properties, "message.timeout.ms", "1000");
    harness_cfg_file(&t->c, t->cfgpath, sizeof(t->cfgpath));
    snprintf(t->plog, sizeof(t->plog), "%s.producer.log", t->cfgpath);
    snprintf(t->clog, sizeof(t->clog), "%s.consumer.log", t->cfgpath);
    assert_int_equal(harness_topic_create(&t->c, t->c.kafka.topic, PARTS), 0);
    assert_int_equal(harness_topic_create(&t->c, t->dlq, 1), 0);

    char err[512];
    rd_kafka_conf_t *conf = harness_kafka_conf(&t->c, "admin");
    assert_int_equal(rd_kafka_conf_set(conf, "enable.idempotence", "true", err, sizeof(err)), RD_KAFKA_CONF_OK);
    assert_non_null(t->kp = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err)));
    t->pg = harness_pg(&t->c);
}

static void consumer_start(struct rt *t)
{
    char bin[512];
    bool ok;
    harness_bin("seckill-consumer", bin, sizeof(bin));
    char *argv[] = { bin, "-c", t->cfgpath, NULL };
    unlink(t->clog);
    t->consumer = harness_spawn(argv, t->clog);
    WAIT_UNTIL(harness_file_has(t->clog, "assigned "), 30000, ok);
    if (!ok)
        fail_msg("consumer never got partitions; see %s", t->clog);
}

static void consumer_stop(struct rt *t)
{
    assert_int_equal(kill(t->consumer, SIGTERM), 0);
    assert_int_equal(harness_wait_exit(t->consumer, 30000), 0);
    t->consumer = 0;
}

static void producer_start(struct rt *t)
{
    char bin[512];
    bool ok;
    harness_bin("seckill-producer", bin, sizeof(bin));
    char *argv[] = { bin, "-c", t->cfgpath, NULL };
    t->producer = harness_spawn(argv, t->plog);
    WAIT_UNTIL(harness_http(t->port, "GET", "/healthz", NULL, NULL, NULL, 0) == 200, 30000, ok);
    if (!ok)
        fail_msg("producer did not come up; see %s", t->plog);
}

static void rt_done(struct rt *t)
{
    if (t->producer > 0) {
        kill(t->producer, SIGTERM);
        assert_int_equal(harness_wait_exit(t->producer, 30000), 0);
    }
    if (t->consumer > 0)
        consumer_stop(t);
    rd_kafka_flush(t->kp, 10000);
    rd_kafka_destroy(t->kp);
    PQfinish(t->pg);
    assert_int_equal(harness_topic_delete(&t->c, t->c.kafka.topic), 0);
    assert_int_equal(harness_topic_delete(&t->c, t->dlq), 0);
    if (!getenv("SECKILL_TEST_KEEP_LOGS")) {
        unlink(t->cfgpath);
        unlink(t->plog);
        unlink(t->clog);
    }
    harness_redis_cleanup(&t->c);
    cfg_free(&t->c);
}

static void produce(struct rt *t, const char *key, const void *val, size_t len, int64_t ts)
{
    rd_kafka_resp_err_t e = rd_kafka_producev(
        t->kp, RD_KAFKA_V_TOPIC(t->c.kafka.topic), RD_KAFKA_V_KEY(key, key ? strlen(key) : 0),
        RD_KAFKA_V_VALUE((void *)val, len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_TIMESTAMP(ts),
        RD_KAFKA_V_END);
    assert_int_equal(e, RD_KAFKA_RESP_ERR_NO_ERROR);
}

static void produce_order(struct rt *t, int64_t oid, int64_t user, int64_t item, int64_t ts)
{
    struct order o = { oid, user, item, 1, ts };
    char buf[ORDER_MSG_MAX], key[ORDER_ID_STR_MAX];
    assert_int_equal(osig_sign(&o), 0);
    int n = order_encode(&o, buf, sizeof(buf));
    assert_true(n > 0);
    snprintf(key, sizeof(key), "%" PRId64, user);
    produce(t, key, buf, (size_t)n, ts);
}

/* The "total" row of a replay summary: read inserted present rejected dead. */
static void replay_totals(const char *out, int64_t v[5])
{
    const char *p = strstr(out, "\n    total");
    if (!p || sscanf(p + 10, "%" SCNd64 " %" SCNd64 " %" SCNd64 " %" SCNd64 " %" SCNd64, &v[0], &v[1], &v[2], &v[3],
                     &v[4]) != 5)
        fail_msg("no totals in the replay output:\n%s", out);
}

static int replay(struct rt *t, int64_t v[5], const char *a1, const char *a2, const char *a3, const char *a4)
{
    char *out;
    const char *args[] = { "-c", t->cfgpath, "--replay", a1, a2, a3, a4, NULL };
    int st = run(&out, "seckill-consumer", args);
    if (st != 0)
        fail_msg("replay exit %d:\n%s", st, out);
    replay_totals(out, v);
    free(out);
    return st;
}

/* The group's committed offsets, -1 where none. */
static void committed(struct rt *t, const char *group, int64_t *out)
{
    char err[512];
    rd_kafka_conf_t *conf = harness_kafka_conf(&t->c, "admin");
    assert_int_equal(rd_kafka_conf_set(conf, "group.id", group, err, sizeof(err)), RD_KAFKA_CONF_OK);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
    assert_non_null(rk);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(PARTS);
    for (int i = 0; i < PARTS; i++)
        rd_kafka_topic_partition_list_add(l, t->c.kafka.topic, i);
    assert_int_equal(rd_kafka_committed(rk, l, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
    for (int i = 0; i < PARTS; i++)
        out[i] = l->elems[i].offset;
    rd_kafka_topic_partition_list_destroy(l);
    rd_kafka_destroy(rk);
}

/* --- replay ---------------------------------------------------------------------- */

static void test_replay_rebuilds_orders(void **state)
{
    (void)state;
    struct rt t;
    int64_t v[5], before[PARTS], after[PARTS], mine[PARTS];
    int64_t item = new_item_id(), users = 800000000000LL + (int64_t)util_rand_below(99999999999ULL);
    int64_t oids = (1LL << 41) + ((int64_t)util_rand_below(1u << 20) << 20);
    int64_t now = util_wall_ms(), old = now - 600000, cut = now - 300000;
    char group_replay[300];
    bool ok;
    rt_init(&t, "replay");
    pg_i64(&t, "INSERT INTO items (item_id, name, stock_total, stock_left) VALUES ($1, 'replay', 300, 300)", item);

    /* Wave 1, ten minutes old: 200 orders, 20 of them delivered twice, and
     * 3 poison messages. Wave 2, now: 100 orders. */
    for (int i = 0; i < 200; i++)
        produce_order(&t, oids + i, users + i, item, old);
    for (int i = 0; i < 20; i++)
        produce_order(&t, oids + i, users + i, item, old);
    produce(&t, "1", "not json", 8, old);
    produce(&t, "2", "{\"order_id\":1}", 14, old);
    produce(&t, NULL, "", 0, old);
    for (int i = 200; i < 300; i++)
        produce_order(&t, oids + i, users + i, item, now);
    assert_int_equal(rd_kafka_flush(t.kp, 30000), RD_KAFKA_RESP_ERR_NO_ERROR);

    consumer_start(&t);
    WAIT_UNTIL(pg_i64(&t, "SELECT count(*) FROM orders WHERE item_id = $1", item) == 300 &&
                   sale_group_caught_up(&t.c, t.c.consumer.group_id, t.c.kafka.topic),
               60000, ok);
    assert_true(ok);
    consumer_stop(&t);
    char *digest = orders_digest(&t, item);
    int64_t left = pg_i64(&t, "SELECT stock_left FROM items WHERE item_id = $1", item);
    assert_int_equal(left, 0);
    committed(&t, t.c.consumer.group_id, before);

    /* Lose the table's rows for the item, as an operator would to rebuild. */
    pg_i64(&t, "DELETE FROM orders WHERE item_id = $1", item);
    pg_i64(&t, "UPDATE items SET stock_left = stock_total WHERE item_id = $1", item);
    assert_int_equal(pg_i64(&t, "SELECT count(*) FROM orders WHERE item_id = $1", item), 0);

    replay(&t, v, "--from-beginning", NULL, NULL, NULL);
    assert_int_equal(v[0], 323); /* read */
    assert_int_equal(v[1], 300); /* inserted */
    assert_int_equal(v[2], 20);  /* already present: the redeliveries */
    assert_int_equal(v[4], 3);   /* dead-lettered */
    char *again = orders_digest(&t, item);
    assert_string_equal(again, digest);
    free(again);
    assert_int_equal(pg_i64(&t, "SELECT stock_left FROM items WHERE item_id = $1", item), left);

    /* Twice changes nothing; with at most 10 messages in flight too (the
     * replay holds back rather than pausing, which would refetch). */
    int max0 = t.c.consumer.max_pending;
    t.c.consumer.max_pending = 10;
    unlink(t.cfgpath);
    harness_cfg_file(&t.c, t.cfgpath, sizeof(t.cfgpath));
    replay(&t, v, "--from-beginning", NULL, NULL, NULL);
    assert_int_equal(v[0], 323);
    assert_int_equal(v[1], 0);
    assert_int_equal(v[2], 320);
    again = orders_digest(&t, item);
    assert_string_equal(again, digest);
    free(again);
    t.c.consumer.max_pending = max0;
    unlink(t.cfgpath);
    harness_cfg_file(&t.c, t.cfgpath, sizeof(t.cfgpath));

    /* A time range picks the waves by their timestamps. */
    char scut[24];
    snprintf(scut, sizeof(scut), "%" PRId64, cut);
    replay(&t, v, "--from-time", scut, NULL, NULL);
    assert_int_equal(v[0], 100);
    replay(&t, v, "--from-beginning", "--to-time", scut, NULL);
    assert_int_equal(v[0], 223);
    char iso[40];
    util_format_time_ms(cut, iso, sizeof(iso));
    replay(&t, v, "--from-time", iso, NULL, NULL);
    assert_int_equal(v[0], 100);

    /* The live group never saw the replays: its offsets did not move, and
     * the replay's own group id committed nothing. */
    committed(&t, t.c.consumer.group_id, after);
    snprintf(group_replay, sizeof(group_replay), "%s.replay", t.c.consumer.group_id);
    committed(&t, group_replay, mine);
    for (int i = 0; i < PARTS; i++) {
        assert_int_equal(after[i], before[i]);
        assert_true(mine[i] < 0);
    }
    free(digest);
    pg_i64(&t, "DELETE FROM orders WHERE item_id = $1", item);
    pg_i64(&t, "DELETE FROM order_rejections WHERE item_id = $1", item);
    pg_i64(&t, "DELETE FROM items WHERE item_id = $1", item);
    rt_done(&t);
}

static void test_replay_arguments(void **state)
{
    (void)state;
    char *out;
    const char *bad[][6] = {
        { "--replay", NULL },
        { "--replay", "--from-beginning", "--from-time", "1", NULL },
        { "--from-beginning", NULL },
        { "--replay", "--from-time", "yesterday", NULL },
        { "--replay", "--from-time", "2026-02-30T00:00:00Z", NULL },
        { "--replay", "--from-time", "2000", "--to-time", "1000", NULL },
    };
    const char *why[] = { "exactly one", "exactly one", "need --replay", "not a time", "not a time", "later than" };
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        assert_int_equal(run(&out, "seckill-consumer", bad[i]), 2);
        if (!strstr(out, why[i]))
            fail_msg("case %zu: no '%s' in: %s", i, why[i], out);
        free(out);
    }
    int64_t ms;
    assert_int_equal(util_parse_time_ms("2026-11-21T10:00:00Z", &ms), 0);
    assert_int_equal(ms, INT64_C(1795255200000));
    assert_int_equal(util_parse_time_ms("2026-11-21T11:00:00.250+01:00", &ms), 0);
    assert_int_equal(ms, INT64_C(1795255200250));
    assert_int_equal(util_parse_time_ms("2026-11-21 10:00:00", &ms), 0);
    assert_int_equal(ms, INT64_C(1795255200000));
    assert_int_equal(util_parse_time_ms("1795255200000", &ms), 0);
    assert_int_equal(ms, INT64_C(1795255200000));
    assert_int_equal(util_parse_time_ms("2026-11-21T10:00", &ms), -1);
    assert_int_equal(util_parse_time_ms("2026-11-21T10:00:00Zjunk", &ms), -1);
    assert_int_equal(util_parse_time_ms("-5", &ms), -1);
}

/* --- reconcile, inspect and item load ---------------------------------------- */

static void sale_run(const struct rt *t, int64_t item, int64_t user_base, int users, int requests, int rate,
                     struct sale **out)
{
    struct sale_params sp = {
        .ports = &t->port, .nports = 1, .item_id = item, .user_base = user_base, .users = users,
        .requests = requests, .conns = 8, .rate = rate,
    };
    assert_int_equal(sale_start(&sp, out), 0);
}

static void settle_and_verify(struct rt *t, int64_t item, struct sale **waves, int n, long want_orders)
{
    char why[512];
    struct sale_report r;
    if (sale_settle(&t->c, item, waves, n, 60000, why, sizeof(why)) != 0)
        fail_msg("the sale did not settle: %s", why);
    assert_int_equal(sale_verify(&t->c, item, waves, n, 0, &r, why, sizeof(why)), 0);
    sale_report_print(stderr, "# ", &r);
    assert_int_equal(r.lost, 0);
    assert_int_equal(r.duplicates, 0);
    assert_int_equal(r.oversold, 0);
    assert_int_equal(r.unexplained, 0);
    assert_int_equal(r.orders, want_orders);
}

/* got is evaluated before *out is read: ctl() fills it. */
static void expect(int got, int want, char **outp, const char *needle)
{
    char *out = *outp;
    if (got != want || (needle && !strstr(out, needle)))
        fail_msg("exit %d (want %d), '%s' %s in:\n%s", got, want, needle ? needle : "",
                 needle && strstr(out, needle) ? "found" : "missing", out);
    free(out);
}

static void test_reconcile_detects_and_fixes(void **state)
{
    (void)state;
    struct rt t;
    struct sale *s;
    char *out, sid[24], k[KEYS_ITEM_PARTS][KEYS_MAX], msg[ORDER_MSG_MAX];
    int64_t item = new_item_id(), users = 810000000000LL + (int64_t)util_rand_below(9999999999ULL);
    rt_init(&t, "recon");
    producer_start(&t);
    consumer_start(&t);
    snprintf(sid, sizeof(sid), "%" PRId64, item);
    expect(ctl(&t, &out, "item", "create", "--id", sid, NULL, NULL), 2, &out, "usage");
    const char *args[] = { "-c", t.cfgpath, "item", "create", "--id", sid, "--stock", "100", NULL };
    expect(run(&out, "seckillctl", args), 0, &out, "created");

    /* 60 buyers for 100 units: a sale that leaves stock. */
    sale_run(&t, item, users, 60, 120, 0, &s);
    sale_wait(s);
    settle_and_verify(&t, item, &s, 1, 60);
    expect(ctl(&t, &out, "reconcile", "--item", sid, NULL, NULL, NULL), 0, &out, " ok");
    expect(ctl(&t, &out, "inspect", "--item", sid, NULL, NULL, NULL), 0, &out, sid);

    /* Corrupt it: stock_left off by 3, a buyer lost, a persisted order's
     * reservation back in Redis, and 2 units too many offered. */
    for (int i = 0; i < KEYS_ITEM_PARTS; i++)
        item_key(&t, item, (enum keys_item_part)i, k[i]);
    redisContext *rc = redis(&t);
    PGresult *r = PQexecParams(t.pg, "SELECT order_id, user_id, (extract(epoch FROM reserved_at) * 1000)::bigint "
                                     "FROM orders WHERE item_id = $1 ORDER BY order_id LIMIT 2",
                               1, NULL, (const char *const[]){ sid }, NULL, NULL, 0);
    assert_int_equal(PQntuples(r), 2);
    struct order o = { strtoll(PQgetvalue(r, 0, 0), NULL, 10), strtoll(PQgetvalue(r, 0, 1), NULL, 10), item, 1,
                       strtoll(PQgetvalue(r, 0, 2), NULL, 10) };
    char lost_buyer[24];
    snprintf(lost_buyer, sizeof(lost_buyer), "%s", PQgetvalue(r, 1, 1));
    PQclear(r);
    assert_int_equal(osig_sign(&o), 0);
    int n = order_encode(&o, msg, sizeof(msg));
    assert_true(n > 0);
    freeReplyObject(harness_cmd(rc, "HSET %s %lld %b", k[KEYS_ITEM_PENDING], (long long)o.order_id, msg, (size_t)n));
    freeReplyObject(harness_cmd(rc, "SREM %s %s", k[KEYS_ITEM_BUYERS], lost_buyer));
    freeReplyObject(harness_cmd(rc, "INCRBY %s 2", k[KEYS_ITEM_STOCK]));
    pg_i64(&t, "UPDATE items SET stock_left = stock_left + 3 WHERE item_id = $1", item);
    /* The buyer of the first order is told nothing of it any more, and
     * Redis opens the sale a day later than the database says. */
    freeReplyObject(harness_cmd(rc, "HDEL %s o:%lld", k[KEYS_ITEM_ORDERS], (long long)o.order_id));
    freeReplyObject(harness_cmd(rc, "HSET %s starts_ms %lld", k[KEYS_ITEM_WINDOW],
                                (long long)(util_wall_ms() + 86400000)));

    expect(ctl(&t, &out, "reconcile", "--item", sid, NULL, NULL, NULL), 1, &out, "MISMATCH");
    ctl(&t, &out, "reconcile", "--item", sid, NULL, NULL, NULL);
    assert_non_null(strstr(out, "(+2 units)"));
    assert_non_null(strstr(out, "missing from the Redis buyers set"));
    assert_non_null(strstr(out, "persisted already"));
    assert_non_null(strstr(out, "stock_left 43 != stock_total 100 - sold 60"));
    assert_non_null(strstr(out, "1 settled orders show another status"));
    assert_non_null(strstr(out, "sale window in Redis"));
    free(out);
    expect(ctl(&t, &out, "inspect", "--item", sid, NULL, NULL, NULL), 1, &out, "43");

    expect(ctl(&t, &out, "reconcile", "--item", sid, "--fix", NULL, NULL), 0, &out, "fixed");
    expect(ctl(&t, &out, "reconcile", "--item", sid, NULL, NULL, NULL), 0, &out, " ok");
    assert_int_equal(harness_int(rc, "GET %s", k[KEYS_ITEM_STOCK]), 40);
    assert_int_equal(harness_int(rc, "HLEN %s", k[KEYS_ITEM_PENDING]), 0);
    assert_int_equal(harness_int(rc, "SISMEMBER %s %s", k[KEYS_ITEM_BUYERS], lost_buyer), 1);
    assert_int_equal(pg_i64(&t, "SELECT stock_left FROM items WHERE item_id = $1", item), 40);
    assert_int_equal(harness_int(rc, "EXISTS %s", k[KEYS_ITEM_WINDOW]), 0);
    {
        redisReply *st = harness_cmd(rc, "HGET %s o:%lld", k[KEYS_ITEM_ORDERS], (long long)o.order_id);
        char want[48];
        snprintf(want, sizeof(want), "%lld|c|", (long long)o.user_id);
        assert_int_equal(st->type, REDIS_REPLY_STRING);
        assert_true(strncmp(st->str, want, strlen(want)) == 0);
        freeReplyObject(st);
    }

    /* A unit missing from the count is never given back: it may still be
     * an order on its way. */
    freeReplyObject(harness_cmd(rc, "DECR %s", k[KEYS_ITEM_STOCK]));
    expect(ctl(&t, &out, "reconcile", "--item", sid, "--fix", NULL, NULL), 1, &out, "not fixed");
    assert_int_equal(harness_int(rc, "GET %s", k[KEYS_ITEM_STOCK]), 39);
    freeReplyObject(harness_cmd(rc, "INCR %s", k[KEYS_ITEM_STOCK]));
    expect(ctl(&t, &out, "reconcile", "--item", sid, NULL, NULL, NULL), 0, &out, " ok");

    redisFree(rc);
    sale_free(s);
    rt_done(&t);
}

static void test_item_load_after_loss_mid_sale(void **state)
{
    (void)state;
    struct rt t;
    struct sale *w[2];
    char *out, sid[24], k[KEYS_ITEM_PARTS][KEYS_MAX], reg[KEYS_MAX];
    int64_t item = new_item_id(), users = 820000000000LL + (int64_t)util_rand_below(9999999999ULL);
    bool ok;
    rt_init(&t, "load");
    producer_start(&t);
    consumer_start(&t);
    snprintf(sid, sizeof(sid), "%" PRId64, item);
    const char *args[] = { "-c", t.cfgpath, "item", "create", "--id", sid, "--stock", "150", NULL };
    expect(run(&out, "seckillctl", args), 0, &out, "created");
    for (int i = 0; i < KEYS_ITEM_PARTS; i++)
        item_key(&t, item, (enum keys_item_part)i, k[i]);
    keys_items(reg, sizeof(reg), t.c.redis.key_prefix);

    /* Redis still holds it: nothing to rebuild, refused. */
    expect(ctl(&t, &out, "item", "load", "--id", sid, NULL, NULL), 1, &out, "still holds");

    /* Wave 1, paced; Redis loses the item once 40 units are taken. */
    sale_run(&t, item, users, 300, 600, 400, &w[0]);
    WAIT_UNTIL(sale_accepted(w[0]) >= 40, 30000, ok);
    assert_true(ok);
    redisContext *rc = redis(&t);
    freeReplyObject(harness_cmd(rc, "DEL %s %s %s %s %s %s", k[0], k[1], k[2], k[3], k[4], k[5]));
    sale_wait(w[0]);
    struct sale_counts sc;
    sale_count(w[0], &sc);
    assert_true(sc.unknown_item > 0); /* the producers answered 404 while it was gone */

    /* The consumer is away and an order waits in the topic: refused. */
    consumer_stop(&t);
    produce_order(&t, (1LL << 42) + (int64_t)util_rand_below(1u << 30), users + 999999, new_item_id(),
                  util_wall_ms());
    assert_int_equal(rd_kafka_flush(t.kp, 30000), RD_KAFKA_RESP_ERR_NO_ERROR);
    expect(ctl(&t, &out, "item", "load", "--id", sid, "--wait-ms", "0"), 1, &out, "has not consumed");
    assert_int_equal(harness_int(rc, "EXISTS %s", k[KEYS_ITEM_STOCK]), 0);

    /* With the consumer back it rebuilds from the database. */
    consumer_start(&t);
    expect(ctl(&t, &out, "item", "load", "--id", sid, NULL, NULL), 0, &out, "rebuilt");
    int64_t sold = pg_i64(&t, "SELECT count(*) FROM orders WHERE item_id = $1", item);
    assert_int_equal(harness_int(rc, "GET %s", k[KEYS_ITEM_STOCK]), 150 - sold);
    assert_int_equal(harness_int(rc, "SCARD %s", k[KEYS_ITEM_BUYERS]), sold);
    assert_int_equal(harness_int(rc, "SISMEMBER %s %s", reg, sid), 1);
    /* Every persisted order's status came back: "o:ORDER" and "u:USER" each,
     * behind the give-back count, which starts again from 0. */
    assert_int_equal(harness_int(rc, "HLEN %s", k[KEYS_ITEM_ORDERS]), 2 * sold + 1);
    assert_int_equal(harness_int(rc, "HGET %s given_back", k[KEYS_ITEM_ORDERS]), 0);
    {
        PGresult *one = PQexecParams(t.pg, "SELECT order_id, user_id FROM orders WHERE item_id = $1 LIMIT 1", 1,
                                     NULL, (const char *const[]){ sid }, NULL, NULL, 0);
        assert_int_equal(PQntuples(one), 1);
        redisReply *st = harness_cmd(rc, "HGET %s o:%s", k[KEYS_ITEM_ORDERS], PQgetvalue(one, 0, 0));
        char want[48], idx[KEYS_MAX];
        snprintf(want, sizeof(want), "%s|c|", PQgetvalue(one, 0, 1));
        assert_int_equal(st->type, REDIS_REPLY_STRING);
        assert_true(strncmp(st->str, want, strlen(want)) == 0);
        freeReplyObject(st);
        /* and the order index leads back to the item */
        keys_order_bucket(idx, sizeof(idx), t.c.redis.key_prefix, strtoll(PQgetvalue(one, 0, 0), NULL, 10));
        st = harness_cmd(rc, "HGET %s %s", idx, PQgetvalue(one, 0, 0));
        snprintf(want, sizeof(want), "%s:%s", sid, PQgetvalue(one, 0, 1));
        assert_int_equal(st->type, REDIS_REPLY_STRING);
        assert_string_equal(st->str, want);
        freeReplyObject(st);
        PQclear(one);
    }

    /* Wave 2: the wave-1 buyers again and new ones; the sale goes on and
     * sells exactly the stock. */
    sale_run(&t, item, users, 900, 1200, 0, &w[1]);
    sale_wait(w[1]);
    settle_and_verify(&t, item, w, 2, 150);
    assert_int_equal(harness_int(rc, "GET %s", k[KEYS_ITEM_STOCK]), 0);
    expect(ctl(&t, &out, "reconcile", "--item", sid, NULL, NULL, NULL), 0, &out, " ok");

    redisFree(rc);
    sale_free(w[0]);
    sale_free(w[1]);
    rt_done(&t);
}

/* --- after the sale (issue #44): reconcile and item load ----------------------- */

/* Text of v, for a parameter or a command. */
#define I64S(buf, v) (snprintf((buf), sizeof(buf), "%" PRId64, (int64_t)(v)), (buf))

static void pg_run3(struct rt *t, const char *sql, int64_t a, int64_t b, int64_t c)
{
    char sa[24], sb[24], sc[24];
    const char *p[] = { I64S(sa, a), I64S(sb, b), I64S(sc, c) };
    PGresult *r = PQexecParams(t->pg, sql, 3, NULL, p, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
        fail_msg("%s: %s", sql, PQerrorMessage(t->pg));
    PQclear(r);
}

/* An item of 10 units, to be paid within 60 s, after its sale: orders
 * base+1 waiting for its payment, base+2 paid, base+3 expired (its unit back
 * in Redis), base+4 expired (its unit not back yet: the consumer has still to
 * send it), base+5 cancelled (back); users ubase+1.. The database and Redis
 * as the consumer leaves them with sale.rebuy_after_cancel = true: Redis
 * stock 10 - 5 + 2 = 7, buyers those of base+1, +2 and +4, the returned set
 * base+3 and +5, each order's state for its buyer. */
static void after_sale_fixture(struct rt *t, int64_t item, int64_t base, int64_t ubase)
{
    char *out, sid[24], k[KEYS_ITEM_PARTS][KEYS_MAX], ret[KEYS_MAX];
    const char *args[] = { "-c",      t->cfgpath, "item",         "create", "--id", I64S(sid, item),
                           "--stock", "10",       "--pay-within", "60",     NULL };
    expect(run(&out, "seckillctl", args), 0, &out, "created");
    pg_run3(t,
            "INSERT INTO orders (order_id, user_id, item_id, reserved_at, fence, status, pay_by, "
            "status_changed_at) "
            "SELECT $2::bigint + g, $3::bigint + g, $1::bigint, now() - interval '1 minute', 1, s, "
            "now() + interval '60 seconds', CASE WHEN s = 'pending_payment' THEN NULL ELSE now() END "
            "FROM unnest(ARRAY['pending_payment', 'paid', 'expired', 'expired', 'cancelled']) "
            "WITH ORDINALITY AS x (s, g)",
            item, base, ubase);
    /* base+4's return waits an hour for its next try: a consumer of the
     * shared database (any key prefix) would send it at once otherwise. */
    pg_run3(t,
            "INSERT INTO order_returns (order_id, item_id, user_id, reason, created_at, done_at, "
            "next_try_at) "
            "SELECT $2::bigint + g, $1::bigint, $3::bigint + g, r, o.status_changed_at, "
            "CASE WHEN g = 4 THEN NULL ELSE now() END, now() + interval '1 hour' "
            "FROM unnest(ARRAY[3, 4, 5], ARRAY['expired', 'expired', 'cancelled']) AS x (g, r) "
            "JOIN orders o ON o.order_id = $2::bigint + g",
            item, base, ubase);
    pg_run3(t, "UPDATE items SET stock_left = 8 WHERE item_id = $1 AND $2::bigint > 0 AND $3::bigint > 0",
            item, base, ubase);
    for (int i = 0; i < KEYS_ITEM_PARTS; i++)
        item_key(t, item, (enum keys_item_part)i, k[i]);
    item_key(t, item, KEYS_ITEM_RETURNED, ret);
    redisContext *rc = redis(t);
    freeReplyObject(harness_cmd(rc, "SET %s 7", k[KEYS_ITEM_STOCK]));
    freeReplyObject(harness_cmd(rc, "SADD %s %lld %lld %lld", k[KEYS_ITEM_BUYERS], (long long)ubase + 1,
                                (long long)ubase + 2, (long long)ubase + 4));
    freeReplyObject(harness_cmd(rc, "SADD %s %lld %lld", ret, (long long)base + 3, (long long)base + 5));
    freeReplyObject(harness_cmd(rc, "HSET %s given_back 2", k[KEYS_ITEM_ORDERS]));
    redisFree(rc);
    /* Each order's state as the consumer copies it: reconcile sets them all
     * from the database (o:ID, u:USER), as it would after a lost write. */
    expect(ctl(t, &out, "reconcile", "--item", sid, "--fix", NULL, NULL), 0, &out,
           "settled orders to the database's");
}

/* The state Redis shows the buyer of order oid ("user|S|...|detail"). */
static char redis_state(struct rt *t, int64_t item, int64_t oid)
{
    char k[KEYS_MAX];
    item_key(t, item, KEYS_ITEM_ORDERS, k);
    redisContext *rc = redis(t);
    redisReply *r = harness_cmd(rc, "HGET %s o:%lld", k, (long long)oid);
    const char *bar = r->type == REDIS_REPLY_STRING ? strchr(r->str, '|') : NULL;
    char st = bar ? bar[1] : 0;
    freeReplyObject(r);
    redisFree(rc);
    return st;
}

static void after_sale_drop(struct rt *t, int64_t item)
{
    pg_i64(t, "DELETE FROM order_returns WHERE item_id = $1", item);
    pg_i64(t, "DELETE FROM orders WHERE item_id = $1", item);
    pg_i64(t, "DELETE FROM items WHERE item_id = $1", item);
}

/* reconcile counts a unit on its way back (an expired order's return not
 * done) and lets its buyer stay in the set meanwhile; a unit given back
 * twice, an order given back that the database never returned, and a
 * return done that Redis' returned set lost are each reported. */
static void test_reconcile_after_the_sale(void **state)
{
    (void)state;
    struct rt t;
    char *out, sid[24], k[KEYS_MAX], ret[KEYS_MAX];
    int64_t item = new_item_id(), base = item * 10,
            ubase = 830000000000LL + (int64_t)util_rand_below(99999999);
    rt_init(&t, "reconsale");
    I64S(sid, item);
    after_sale_fixture(&t, item, base, ubase);
    expect(ctl(&t, &out, "reconcile", "--item", sid, NULL, NULL, NULL), 0, &out, " ok");
    assert_int_equal(redis_state(&t, item, base + 1), 'w');
    assert_int_equal(redis_state(&t, item, base + 2), 'p');
    assert_int_equal(redis_state(&t, item, base + 3), 'x');
    assert_int_equal(redis_state(&t, item, base + 5), 'k');

    /* A unit given back twice is one unit too many in the stock: the stock
     * check sees it (given_back cannot: a producer's give-back of an
     * unpublished reservation counts there too). */
    item_key(&t, item, KEYS_ITEM_ORDERS, k);
    item_key(&t, item, KEYS_ITEM_RETURNED, ret);
    redisContext *rc = redis(&t);
    char ks[KEYS_MAX];
    item_key(&t, item, KEYS_ITEM_STOCK, ks);
    freeReplyObject(harness_cmd(rc, "INCR %s", ks));
    freeReplyObject(harness_cmd(rc, "HINCRBY %s given_back 1", k));
    expect(ctl(&t, &out, "reconcile", "--item", sid, NULL, NULL, NULL), 1, &out, "+ returning 1 (+1 units)");
    freeReplyObject(harness_cmd(rc, "DECR %s", ks));
    expect(ctl(&t, &out, "reconcile", "--item", sid, NULL, NULL, NULL), 0, &out, " ok");

    /* The paid order in the returned set: given back while it holds its unit. */
    freeReplyObject(harness_cmd(rc, "SADD %s %lld", ret, (long long)base + 2));
    expect(ctl(&t, &out, "reconcile", "--item", sid, NULL, NULL, NULL), 1, &out,
           "that the database never returned");
    freeReplyObject(harness_cmd(rc, "SREM %s %lld", ret, (long long)base + 2));
    /* A return done that the set lost: sent again, it would give its unit twice. */
    freeReplyObject(harness_cmd(rc, "SREM %s %lld", ret, (long long)base + 3));
    expect(ctl(&t, &out, "reconcile", "--item", sid, NULL, NULL, NULL), 1, &out,
           "missing from Redis' returned set");
    freeReplyObject(harness_cmd(rc, "SADD %s %lld", ret, (long long)base + 3));

    /* The consumer gives base+4's unit back (and takes its buyer out): still ok. */
    char kb[KEYS_MAX];
    item_key(&t, item, KEYS_ITEM_BUYERS, kb);
    freeReplyObject(harness_cmd(rc, "FCALL seckill_return 4 %s %s %s %s 1 %lld %lld", ks, kb, k, ret,
                                (long long)base + 4, (long long)ubase + 4));
    redisFree(rc);
    expect(ctl(&t, &out, "reconcile", "--item", sid, NULL, NULL, NULL), 0, &out, " ok");
    after_sale_drop(&t, item);
    rt_done(&t);
}

/* Redis lost the item: DEL its keys, the returned set too. */
static void lose_item(struct rt *t, int64_t item)
{
    char k[KEYS_ITEM_PARTS + 1][KEYS_MAX];
    for (int i = 0; i < KEYS_ITEM_PARTS; i++)
        item_key(t, item, (enum keys_item_part)i, k[i]);
    item_key(t, item, KEYS_ITEM_RETURNED, k[KEYS_ITEM_PARTS]);
    redisContext *rc = redis(t);
    freeReplyObject(harness_cmd(rc, "DEL %s %s %s %s %s %s %s", k[0], k[1], k[2], k[3], k[4], k[5], k[6]));
    redisFree(rc);
}

static long long redis_card(struct rt *t, int64_t item, enum keys_item_part part)
{
    char k[KEYS_MAX];
    item_key(t, item, part, k);
    redisContext *rc = redis(t);
    long long v = part == KEYS_ITEM_STOCK ? harness_int(rc, "GET %s", k) : harness_int(rc, "SCARD %s", k);
    redisFree(rc);
    return v;
}

/* item load after Redis lost an item after its sale: refused while a return
 * is on its way (the rebuilt stock would count it twice), then the stock
 * from stock_left, every order's state (w, p, x, k), the returned set, and
 * the buyers per sale.rebuy_after_cancel: those of expired and cancelled
 * orders left out (true) or kept (false). */
static void test_item_load_restores_states(void **state)
{
    (void)state;
    struct rt t;
    char *out, sid[24], cfg2[128];
    int64_t item = new_item_id(), base = item * 10,
            ubase = 840000000000LL + (int64_t)util_rand_below(99999999);
    rt_init(&t, "loadsale");
    I64S(sid, item);
    after_sale_fixture(&t, item, base, ubase);
    lose_item(&t, item);
    expect(ctl(&t, &out, "item", "load", "--id", sid, NULL, NULL), 1, &out, "on their way back");
    pg_i64(&t, "UPDATE order_returns SET done_at = now() WHERE order_id = $1", base + 4);

    expect(ctl(&t, &out, "item", "load", "--id", sid, NULL, NULL), 0, &out, "rebuilt: stock 8, 2 buyers");
    assert_int_equal(redis_card(&t, item, KEYS_ITEM_STOCK), 8);
    assert_int_equal(redis_card(&t, item, KEYS_ITEM_BUYERS), 2);
    assert_int_equal(redis_card(&t, item, KEYS_ITEM_RETURNED), 3);
    const char want[] = { 'w', 'p', 'x', 'x', 'k' };
    for (int i = 0; i < 5; i++)
        assert_int_equal(redis_state(&t, item, base + 1 + i), want[i]);
    expect(ctl(&t, &out, "reconcile", "--item", sid, NULL, NULL, NULL), 0, &out, " ok");

    /* sale.rebuy_after_cancel = false: the buyers of the returned orders stay. */
    t.c.sale.rebuy_after_cancel = 0;
    harness_cfg_file(&t.c, cfg2, sizeof(cfg2));
    lose_item(&t, item);
    const char *load[] = { "-c", cfg2, "item", "load", "--id", sid, NULL };
    expect(run(&out, "seckillctl", load), 0, &out, "rebuilt: stock 8, 2 buyers");
    assert_int_equal(redis_card(&t, item, KEYS_ITEM_BUYERS), 5);
    assert_int_equal(redis_card(&t, item, KEYS_ITEM_RETURNED), 3);
    const char *recon[] = { "-c", cfg2, "reconcile", "--item", sid, NULL };
    expect(run(&out, "seckillctl", recon), 0, &out, " ok");
    /* and with true, those buyers in the set are ones that should not be */
    expect(ctl(&t, &out, "reconcile", "--item", sid, NULL, NULL, NULL), 1, &out, "hold neither");
    unlink(cfg2);
    after_sale_drop(&t, item);
    rt_done(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay_arguments),
        cmocka_unit_test(test_replay_rebuilds_orders),
        cmocka_unit_test(test_reconcile_detects_and_fixes),
        cmocka_unit_test(test_item_load_after_loss_mid_sale),
        cmocka_unit_test(test_reconcile_after_the_sale),
        cmocka_unit_test(test_item_load_restores_states),
    };
    harness_filter();
    return cmocka_run_group_tests(tests, harness_setup, harness_teardown);
}
