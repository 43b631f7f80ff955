/* An order's life after the sale (issue #44), end to end against the stack:
 * an item with a payment window (seckillctl item create --pay-within), its
 * orders bought through a producer and persisted by consumers as
 * pending_payment, expired once past pay_by, their units given back to
 * stock_left and then to Redis exactly once, the buyers free to buy again,
 * and a producer that answered 410 selling the units again.
 *
 * The consumers run as an ACL user of this run with the rules
 * scripts/stack.d/redis.sh gives the consumer (redis_acl_rules), so the test
 * also shows those rules let it return units and nothing beyond them is
 * needed; this run's function library seckill_return is loaded first (a
 * library of its own: loading it changes no other library). Each test has its
 * own item, users, topic and group. */
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
#include "sale.h"

static char last_resp[512];

static int order(int port, int64_t u, int64_t item)
{
    return harness_order(port, u, item, last_resp, sizeof(last_resp));
}

/* --- fixtures ------------------------------------------------------------------ */

static int setup(void **state)
{
    return life_setup(state, "orderlife");
}

/* --- a producer and consumers ---------------------------------------------------- */

/* Each run on a topic and group of its own. */
static const struct life_opts opts = {
    .name = "orderlife", .item_base = 970000000, .user_base = 5000000, .user_span = 16
};

/* --- what the stores hold --------------------------------------------------------- */

static int64_t returns_open(int64_t item)
{
    return life_pg_int("SELECT count(*) FROM order_returns WHERE item_id = $1 AND done_at IS NULL", item);
}

static bool is_buyer(int64_t item, int64_t u)
{
    char k[KEYS_MAX], su[24];
    assert_true(keys_item(k, sizeof(k), harness_conf.redis.key_prefix, item, KEYS_ITEM_BUYERS) > 0);
    snprintf(su, sizeof(su), "%" PRId64, u);
    redisContext *rc = harness_redis(&harness_conf);
    long long v = harness_int(rc, "SISMEMBER %s %s", k, su);
    redisFree(rc);
    return v == 1;
}

/* seckill_return called again for the item's returned orders, as a retry or
 * a replay would: the units it gave back this time. */
static long long return_again(int64_t item, int n)
{
    char k[4][KEYS_MAX], ids[8][24], us[8][24];
    const char *argv[3 + 4 + 1 + 16];
    int a = 0;
    const enum keys_item_part parts[] = { KEYS_ITEM_STOCK, KEYS_ITEM_BUYERS, KEYS_ITEM_ORDERS,
                                          KEYS_ITEM_RETURNED };
    argv[a++] = "FCALL", argv[a++] = "seckill_return", argv[a++] = "4";
    for (int i = 0; i < 4; i++) {
        assert_true(keys_item(k[i], sizeof(k[i]), harness_conf.redis.key_prefix, item, parts[i]) > 0);
        argv[a++] = k[i];
    }
    argv[a++] = "1";
    PGconn *pg = harness_pg(&harness_conf);
    char sitem[24];
    snprintf(sitem, sizeof(sitem), "%" PRId64, item);
    const char *p[] = { sitem };
    PGresult *r = PQexecParams(pg, "SELECT order_id, user_id FROM order_returns WHERE item_id = $1", 1, NULL,
                               p, NULL, NULL, 0);
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(r), n);
    for (int i = 0; i < n && i < 8; i++) {
        snprintf(ids[i], sizeof(ids[i]), "%s", PQgetvalue(r, i, 0));
        snprintf(us[i], sizeof(us[i]), "%s", PQgetvalue(r, i, 1));
        argv[a++] = ids[i];
        argv[a++] = us[i];
    }
    PQclear(r);
    PQfinish(pg);
    redisContext *rc = harness_redis(&harness_conf);
    redisReply *rep = redisCommandArgv(rc, a, argv, NULL);
    assert_non_null(rep);
    if (rep->type != REDIS_REPLY_INTEGER)
        fail_msg("FCALL seckill_return: %s", rep->type == REDIS_REPLY_ERROR ? rep->str : "not an integer");
    long long v = rep->integer;
    freeReplyObject(rep);
    redisFree(rc);
    return v;
}

/* seckillctl item show's payment line holds want. */
static void item_show_says(const struct life *l, const char *want)
{
    char sid[24], *out = NULL;
    snprintf(sid, sizeof(sid), "%" PRId64, l->item);
    const char *args[] = { "-c", l->cfgpath[0], "item", "show", sid, NULL };
    int st = harness_run(&out, "seckillctl", args, 30000);
    if (st != 0 || !strstr(out, want))
        fail_msg("seckillctl item show: exit %d, no \"%s\" in: %s", st, want, out);
    free(out);
}

/* --- the tests ---------------------------------------------------------------------- */

/* Orders of an item with a one-second window, bought through a producer and
 * persisted pending by two consumers, expire; each unit goes back to
 * stock_left and to Redis once (whichever consumer expires or returns it),
 * the buyers are free again, a retry or replay of the returns gives nothing
 * twice, and the buyer the producer had told "sold out" gets a unit. */
static void test_expired_units_sell_again(void **state)
{
    (void)state;
    enum { STOCK = 3 };
    struct life l;
    int64_t u[STOCK + 1];
    bool ok;
    life_start(&l, &opts, 2, STOCK, 1);
    for (int i = 0; i <= STOCK; i++)
        u[i] = l.user_base + i;
    for (int i = 0; i < STOCK; i++)
        if (order(l.port, u[i], l.item) != 202)
            fail_msg("buyer %d: %s; see %s", i, last_resp, l.plog);
    assert_int_equal(order(l.port, u[STOCK], l.item), 410); /* sold out: the producer remembers it */
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_STOCK), 0);

    /* Persisted pending, to be paid a second after, then expired. */
    WAIT_UNTIL(life_orders_in(l.item, "expired") == STOCK, 30000, ok);
    if (!ok)
        fail_msg("%lld of %d orders expired (%lld pending); see %s",
                 (long long)life_orders_in(l.item, "expired"), STOCK,
                 (long long)life_orders_in(l.item, "pending_payment"), l.clog[0]);
    assert_int_equal(life_pg_int("SELECT count(*) FROM orders WHERE item_id = $1 AND pay_by = persisted_at + "
                                 "interval '1 second' AND status_changed_at >= pay_by",
                                 l.item),
                     STOCK);
    WAIT_UNTIL(life_returns_done(l.item) == STOCK, 30000, ok);
    if (!ok)
        fail_msg("%lld of %d returns done; see %s", (long long)life_returns_done(l.item), STOCK, l.clog[0]);

    /* Each unit back once, in both stores; the buyers free again. */
    assert_int_equal(life_stock_left(l.item), STOCK);
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_STOCK), STOCK);
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_RETURNED), STOCK);
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_BUYERS), 0);
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_ORDERS), STOCK); /* given_back: the producers' witness */
    WAIT_UNTIL(life_cons_metric(&l, "seckill_consumer_orders_expired_total") == STOCK &&
                   life_cons_metric(&l, "seckill_consumer_units_returned_total") == STOCK &&
                   sale_metric(l.cport[0], "seckill_consumer_returns_pending") == 0,
               10000, ok);
    if (!ok)
        fail_msg("metrics: expired %lld, returned %lld, pending %lld",
                 (long long)life_cons_metric(&l, "seckill_consumer_orders_expired_total"),
                 (long long)life_cons_metric(&l, "seckill_consumer_units_returned_total"),
                 (long long)sale_metric(l.cport[0], "seckill_consumer_returns_pending"));

    item_show_says(&l, "payment    within 1 s: pending 0, expired 3, returns not yet in Redis 0");

    /* A retry or a replay of the returns gives nothing twice: Redis by order
     * id, and the consumers sending every return again (done_at lost, as
     * after a crash between Redis and the mark). */
    assert_int_equal(return_again(l.item, STOCK), 0);
    assert_int_equal(harness_pg_try(&harness_conf,
                                    "UPDATE order_returns SET done_at = NULL, next_try_at = now() "
                                    "WHERE item_id = $1",
                                    l.item, 0),
                     0);
    WAIT_UNTIL(life_returns_done(l.item) == STOCK, 10000, ok);
    assert_true(ok);
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_STOCK), STOCK);
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_ORDERS), STOCK);
    assert_int_equal(life_stock_left(l.item), STOCK);
    assert_int_equal(life_cons_metric(&l, "seckill_consumer_units_returned_total"), STOCK);

    /* A replay of the topic: the expired orders are found by id (duplicates),
     * never persisted again as new ones now that their buyers hold nothing. */
    char *out = NULL;
    const char *rargs[] = { "-c", l.cfgpath[0], "--replay", "--from-beginning", NULL };
    int st = harness_run(&out, "seckill-consumer", rargs, 60000);
    if (st != 0)
        fail_msg("replay exit %d: %s", st, out);
    free(out);
    assert_int_equal(life_pg_int("SELECT count(*) FROM orders WHERE item_id = $1", l.item), STOCK);
    assert_int_equal(life_orders_in(l.item, "expired"), STOCK);
    assert_int_equal(life_stock_left(l.item), STOCK);
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_STOCK), STOCK);

    /* The buyer told "sold out" gets a unit within the producer's refresh
     * period; a buyer whose order expired may buy again. */
    int64_t t0 = util_mono_ms();
    WAIT_UNTIL(order(l.port, u[STOCK], l.item) == 202, 10000, ok);
    if (!ok)
        fail_msg("the buyer told sold out still hears: %s; see %s", last_resp, l.plog);
    printf("# a returned unit was sold again after %lld ms\n", (long long)(util_mono_ms() - t0));
    if (order(l.port, u[0], l.item) != 202)
        fail_msg("a buyer whose order expired may not buy again: %s", last_resp);
    assert_false(is_buyer(l.item, u[1]));
    life_stop(&l);
}

/* A sale of stock units with a window of pay_s seconds, one consumer:
 * sold buyers buy, and their orders are persisted pending payment. */
static void sell_pending(struct life *l, int64_t stock, int sold, int pay_s)
{
    bool ok;
    life_start(l, &opts, 1, stock, pay_s);
    for (int i = 0; i < sold; i++)
        if (order(l->port, l->user_base + i, l->item) != 202)
            fail_msg("buyer %d: %s; see %s", i, last_resp, l->plog);
    WAIT_UNTIL(life_orders_in(l->item, "pending_payment") == sold, 15000, ok);
    if (!ok)
        fail_msg("%lld of %d orders pending payment; see %s",
                 (long long)life_orders_in(l->item, "pending_payment"), sold, l->clog[0]);
}

/* A return that cannot reach Redis (the consumer's user refused) stays in
 * order_returns, counted, said once; the consumer stops and starts again
 * meanwhile, and once Redis takes it back each unit is returned once. */
static void test_return_waits_for_redis(void **state)
{
    (void)state;
    enum { STOCK = 5, SOLD = 3 };
    struct life l;
    bool ok;
    sell_pending(&l, STOCK, SOLD, 2);
    sale_acl_user_switch(life_user(), false);

    WAIT_UNTIL(life_orders_in(l.item, "expired") == SOLD && returns_open(l.item) == SOLD &&
                   life_pg_int("SELECT min(tries) FROM order_returns WHERE item_id = $1", l.item) >= 1 &&
                   sale_metric(l.cport[0], "seckill_consumer_returns_pending") == SOLD,
               30000, ok);
    if (!ok)
        fail_msg("expired %lld, returns open %lld, gauge %lld; see %s",
                 (long long)life_orders_in(l.item, "expired"), (long long)returns_open(l.item),
                 (long long)sale_metric(l.cport[0], "seckill_consumer_returns_pending"), l.clog[0]);
    assert_int_equal(life_stock_left(l.item), STOCK);
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_STOCK), STOCK - SOLD);
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_BUYERS), SOLD);
    assert_int_equal(harness_file_lines(l.clog[0], "units of expired orders wait in order_returns"), 1);
    item_show_says(&l, "payment    within 2 s: pending 0, expired 3, returns not yet in Redis 3");

    /* A restart while Redis is away: nothing is lost. */
    life_stop_consumer(&l, 0);
    assert_int_equal(returns_open(l.item), SOLD);
    sale_acl_user_switch(life_user(), true);
    unlink(l.clog[0]);
    life_start_consumer(&l, 0);
    WAIT_UNTIL(life_returns_done(l.item) == SOLD && life_redis_of(l.item, KEYS_ITEM_STOCK) == STOCK, 30000,
               ok);
    if (!ok)
        fail_msg("after Redis came back: %lld returns done, Redis stock %lld; see %s",
                 (long long)life_returns_done(l.item), life_redis_of(l.item, KEYS_ITEM_STOCK), l.clog[0]);
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_RETURNED), SOLD);
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_BUYERS), 0);
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_ORDERS), SOLD);
    assert_int_equal(life_stock_left(l.item), STOCK);
    WAIT_UNTIL(sale_metric(l.cport[0], "seckill_consumer_units_returned_total") == SOLD, 10000, ok);
    assert_true(ok);
    life_stop(&l);
}

/* A window that ends after its order was paid is only dropped: the expiry
 * takes it from order_deadlines, leaves the order paid, and counts it
 * towards a full batch, so the windows behind it do not wait for the next
 * interval; so is the window of an order an operator deleted. Here the
 * deleted order's window and four paid ones end first, then two unpaid
 * ones; with expire_batch 2 and an interval of a minute, the unpaid orders
 * expire in the consumer's first passes, back to back. */
static void test_paid_windows_dropped(void **state)
{
    (void)state;
    enum { STOCK = 6, PAID = 4 };
    static const char deadlines[] =
        "SELECT count(*) FROM order_deadlines d JOIN orders o USING (order_id) WHERE o.item_id = $1";
    char path[sizeof(((struct life *)0)->cfgpath[0])];
    struct life l;
    bool ok;
    sell_pending(&l, STOCK, STOCK, 3600);
    assert_int_equal(life_pg_int(deadlines, l.item), STOCK);
    life_stop_consumer(&l, 0);
    assert_int_equal(harness_pg_try(&harness_conf,
                                    "UPDATE orders SET status = 'paid', status_changed_at = now(), "
                                    "status_reason = 'paid by the test' WHERE order_id IN "
                                    "(SELECT order_id FROM orders WHERE item_id = $1 ORDER BY order_id LIMIT $2)",
                                    l.item, PAID),
                     0);
    assert_int_equal(harness_pg_try(&harness_conf,
                                    "UPDATE order_deadlines d SET pay_by = now() - CASE o.status WHEN 'paid' "
                                    "THEN interval '20 seconds' ELSE interval '10 seconds' END "
                                    "FROM orders o WHERE o.order_id = d.order_id AND o.item_id = $1",
                                    l.item, 0),
                     0);
    /* The deleted order's window: an id no order has (above the item's by 2^40). */
    int64_t orphan = life_pg_int2("SELECT max(order_id) + $2 FROM orders WHERE item_id = $1", l.item,
                                  (int64_t)1 << 40);
    assert_int_equal(harness_pg_try(&harness_conf,
                                    "INSERT INTO order_deadlines (order_id, pay_by) "
                                    "VALUES ($1, now() - interval '30 seconds')",
                                    orphan, 0),
                     0);

    l.c.consumer.expire_batch = 2;
    l.c.consumer.expire_interval_ms = 60000;
    l.c.consumer.metrics_port = l.cport[0];
    harness_cfg_file(&l.c, path, sizeof(path));
    memcpy(l.cfgpath[0], path, sizeof(path));
    unlink(l.clog[0]);
    life_start_consumer(&l, 0);
    WAIT_UNTIL(life_orders_in(l.item, "expired") == STOCK - PAID && life_returns_done(l.item) == STOCK - PAID,
               20000, ok);
    if (!ok)
        fail_msg("%lld of %d unpaid orders expired, %lld windows left; see %s",
                 (long long)life_orders_in(l.item, "expired"), STOCK - PAID,
                 (long long)life_pg_int(deadlines, l.item), l.clog[0]);
    assert_int_equal(life_orders_in(l.item, "paid"), PAID);
    assert_int_equal(life_pg_int(deadlines, l.item), 0);
    assert_int_equal(life_pg_int("SELECT count(*) FROM order_deadlines WHERE order_id = $1", orphan), 0);
    assert_int_equal(life_stock_left(l.item), STOCK - PAID);
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_STOCK), STOCK - PAID);
    life_stop(&l);
}

/* --- the states after the sale (issue #44, item 6) ----------------------------------- */

/* The order id a 202 answer holds ("order_id":"ID"), or 0. */
/* Consumer 0 again with redis.min_replicas_ack want (WAIT for that many
 * replicas, 50 ms at most), its log started afresh. */
static void consumer_with_replicas(struct life *l, int want)
{
    char path[sizeof(l->cfgpath[0])];
    life_stop_consumer(l, 0);
    l->c.redis.min_replicas_ack = want;
    l->c.redis.wait_timeout_ms = 50;
    l->c.consumer.metrics_port = l->cport[0];
    harness_cfg_file(&l->c, path, sizeof(path));
    memcpy(l->cfgpath[0], path, sizeof(path));
    unlink(l->clog[0]);
    life_start_consumer(l, 0);
    life_wait_assigned(l, 0);
}

/* With redis.min_replicas_ack 1 and no replica (the dev stack's Redis has
 * none), a return Redis took is not done: a failover could lose it while
 * PostgreSQL said done. It is sent again and again, and Redis counts each
 * unit once; it is done as soon as the consumer no longer asks for a
 * replica. */
static void test_return_waits_for_replicas(void **state)
{
    (void)state;
    enum { STOCK = 4, SOLD = 2 };
    struct life l;
    bool ok;
    sell_pending(&l, STOCK, SOLD, 6);
    consumer_with_replicas(&l, 1);
    if (life_orders_in(l.item, "expired") != 0)
        fail_msg("the orders expired before the consumer asked for a replica; see %s", l.clog[0]);

    WAIT_UNTIL(life_orders_in(l.item, "expired") == SOLD && returns_open(l.item) == SOLD &&
                   life_pg_int("SELECT min(tries) FROM order_returns WHERE item_id = $1", l.item) >= 2,
               30000, ok);
    if (!ok)
        fail_msg("expired %lld, returns open %lld; see %s", (long long)life_orders_in(l.item, "expired"),
                 (long long)returns_open(l.item), l.clog[0]);
    /* Sent at least twice each, and every unit counted once. */
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_STOCK), STOCK);
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_RETURNED), SOLD);
    assert_int_equal(harness_file_lines(l.clog[0], "fewer than 1 replicas hold the returned units"), 1);

    consumer_with_replicas(&l, 0);
    WAIT_UNTIL(life_returns_done(l.item) == SOLD, 30000, ok);
    if (!ok)
        fail_msg("%lld of %d returns done without replicas asked for; see %s",
                 (long long)life_returns_done(l.item), SOLD, l.clog[0]);
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_STOCK), STOCK);
    assert_int_equal(life_stock_left(l.item), STOCK);
    life_stop(&l);
}

static int64_t order_id_of(const char *resp)
{
    const char *p = strstr(resp, "\"order_id\":\"");
    return p ? strtoll(p + strlen("\"order_id\":\""), NULL, 10) : 0;
}

/* The orders hash's field o:ID of the item (NULL when it has none; the
 * caller frees it). */
static char *orders_field(int64_t item, int64_t oid)
{
    char k[KEYS_MAX], f[32];
    assert_true(keys_item(k, sizeof(k), harness_conf.redis.key_prefix, item, KEYS_ITEM_ORDERS) > 0);
    snprintf(f, sizeof(f), "o:%" PRId64, oid);
    redisContext *rc = harness_redis(&harness_conf);
    redisReply *r = redisCommand(rc, "HGET %s %s", k, f);
    char *v = r && r->type == REDIS_REPLY_STRING ? strdup(r->str) : NULL;
    freeReplyObject(r);
    redisFree(rc);
    return v;
}

/* The field's state letter (its second part), or 0. */
static char field_state(const char *v)
{
    const char *bar = v ? strchr(v, '|') : NULL;
    return bar ? bar[1] : 0;
}

/* An order that expired is 'x' in the item's orders hash, with the time it
 * expired (its status_changed_at, ms), once its return is done; the status
 * call says "expired". A return sent again (done_at lost) leaves it so. */
static void test_expired_state_in_redis(void **state)
{
    (void)state;
    struct life l;
    char resp[2048], path[64], *v;
    bool ok;
    life_start(&l, &opts, 1, 2, 1);
    if (order(l.port, l.user_base, l.item) != 202)
        fail_msg("buyer: %s; see %s", last_resp, l.plog);
    int64_t oid = order_id_of(last_resp);
    assert_true(oid > 0);
    WAIT_UNTIL(life_orders_in(l.item, "expired") == 1 && life_returns_done(l.item) == 1, 30000, ok);
    if (!ok)
        fail_msg("expired %lld, returns done %lld; see %s", (long long)life_orders_in(l.item, "expired"),
                 (long long)life_returns_done(l.item), l.clog[0]);
    v = orders_field(l.item, oid);
    if (field_state(v) != 'x')
        fail_msg("o:%" PRId64 " is \"%s\", not expired ('x'); see %s", oid, v ? v : "(none)", l.clog[0]);
    int64_t changed = life_pg_int("SELECT (extract(epoch FROM status_changed_at) * 1000)::bigint FROM orders "
                                  "WHERE item_id = $1",
                                  l.item);
    const char *detail = strrchr(v, '|');
    assert_non_null(detail);
    assert_int_equal(strtoll(detail + 1, NULL, 10), changed);
    free(v);
    snprintf(path, sizeof(path), "/api/v1/orders/%" PRId64, oid);
    assert_int_equal(harness_http(l.port, "GET", path, NULL, NULL, resp, sizeof(resp)), 200);
    if (!strstr(resp, "\"status\":\"expired\""))
        fail_msg("GET %s: %s", path, resp);

    /* Sent again: the same state, the unit not given twice. */
    assert_int_equal(harness_pg_try(&harness_conf,
                                    "UPDATE order_returns SET done_at = NULL, next_try_at = now() "
                                    "WHERE item_id = $1",
                                    l.item, 0),
                     0);
    WAIT_UNTIL(life_returns_done(l.item) == 1, 10000, ok);
    assert_true(ok);
    v = orders_field(l.item, oid);
    assert_int_equal(field_state(v), 'x');
    free(v);
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_STOCK), 2);
    life_stop(&l);
}

/* --- promises under a replay (issue #55) ------------------------------------------ */

/* The item's orders of buyer u (any state). */
static int64_t orders_of(int64_t item, int64_t u)
{
    return life_pg_int2("SELECT count(*) FROM orders WHERE item_id = $1 AND user_id = $2", item, u);
}

/* Whether order_rejections holds order oid, refused for want of stock. */
static bool refused_no_stock(int64_t oid)
{
    return life_pg_int("SELECT count(*) FROM order_rejections WHERE order_id = $1 AND reason = 'no_stock'",
                       oid) == 1;
}

/* Give the item's later buyers a window of pay_s seconds (cons_insert.sql
 * reads it when it persists an order). */
static void set_window(int64_t item, int pay_s)
{
    assert_int_equal(harness_pg_try(&harness_conf, "UPDATE items SET pay_within_s = $2 WHERE item_id = $1", item,
                                    pay_s),
                     0);
}

/* seckill-consumer --replay --from-beginning of the run's topic, which must
 * end with 0. */
static void replay_all(const struct life *l)
{
    char *out = NULL;
    const char *rargs[] = { "-c", l->cfgpath[0], "--replay", "--from-beginning", NULL };
    int st = harness_run(&out, "seckill-consumer", rargs, 60000);
    if (st != 0)
        fail_msg("replay exit %d: %s", st, out);
    free(out);
}

/* Order oid of buyer u (persisted or refused) published again on the run's
 * topic, signed with the producers' key, as the sweeper publishes a
 * reservation again. */
static void publish_again(const struct life *l, int64_t oid, int64_t u)
{
    struct order o = { oid, u, l->item, 1, 0 };
    char buf[ORDER_MSG_MAX], key[24];
    o.reserved_at_ms = life_pg_int("SELECT (extract(epoch FROM reserved_at) * 1000)::bigint FROM ("
                                   "SELECT reserved_at FROM orders WHERE order_id = $1 UNION ALL "
                                   "SELECT reserved_at FROM order_rejections WHERE order_id = $1) AS r LIMIT 1",
                                   oid);
    assert_true(o.reserved_at_ms > 0);
    assert_int_equal(osig_sign(&o), 0);
    int n = order_encode(&o, buf, sizeof(buf));
    assert_true(n > 0);
    snprintf(key, sizeof(key), "%" PRId64, u);
    rd_kafka_t *rk = life_producer(&l->c, "admin", "0");
    life_produce(rk, l->c.kafka.topic, key, buf, (size_t)n);
    assert_int_equal(rd_kafka_flush(rk, 30000), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_destroy(rk);
}

/* The buyer's status of order oid holds want. */
static void order_status_says(const struct life *l, int64_t oid, const char *want)
{
    char resp[2048], path[64];
    snprintf(path, sizeof(path), "/api/v1/orders/%" PRId64, oid);
    int st = harness_http(l->port, "GET", path, NULL, NULL, resp, sizeof(resp));
    if (st != 200 || !strstr(resp, want))
        fail_msg("GET %s: %d %s (wanted %s)", path, st, resp, want);
}

/* A refusal is final (issue #55, item 1). Redis oversold by one, as after a
 * failover that lost a reservation: buyers A and B both get 202, PostgreSQL
 * keeps A and refuses B for want of stock. A never pays and expires: its
 * unit goes back on sale. A replay of the topic, and B's order published
 * again (as the sweeper does), leave B refused, counted as a duplicate, and
 * the unit on sale; buyer C then buys it and ends pending payment. Before,
 * the replay inserted B's order, which took the returned unit, and C's 202
 * ended refused. */
static void test_refusal_final_under_replay(void **state)
{
    (void)state;
    struct life l;
    char k[KEYS_MAX];
    bool ok;
    life_start(&l, &opts, 1, 1, 1);
    int64_t a = l.user_base, b = l.user_base + 1, c = l.user_base + 2;
    if (order(l.port, a, l.item) != 202)
        fail_msg("buyer A: %s; see %s", last_resp, l.plog);
    WAIT_UNTIL(orders_of(l.item, a) == 1, 15000, ok);
    assert_true(ok);
    /* Oversold by one: Redis gains a unit PostgreSQL does not have. */
    assert_true(keys_item(k, sizeof(k), harness_conf.redis.key_prefix, l.item, KEYS_ITEM_STOCK) > 0);
    redisContext *rc = harness_redis(&harness_conf);
    freeReplyObject(harness_cmd(rc, "INCR %s", k));
    redisFree(rc);
    WAIT_UNTIL(order(l.port, b, l.item) == 202, 5000, ok);
    if (!ok)
        fail_msg("buyer B: %s; see %s", last_resp, l.plog);
    int64_t ob = order_id_of(last_resp);
    assert_true(ob > 0);
    WAIT_UNTIL(refused_no_stock(ob), 15000, ok);
    if (!ok)
        fail_msg("B's order %" PRId64 " not refused; see %s", ob, l.clog[0]);

    /* A expires; its unit goes back to stock_left and to Redis. */
    WAIT_UNTIL(life_orders_in(l.item, "expired") == 1 && life_returns_done(l.item) == 1, 30000, ok);
    assert_true(ok);
    set_window(l.item, 600); /* C's order stays pending long enough to be seen */
    assert_int_equal(life_stock_left(l.item), 1);

    int64_t dups = life_cons_metric(&l, "seckill_consumer_duplicates_skipped_total");
    replay_all(&l);
    assert_int_equal(orders_of(l.item, b), 0);
    assert_int_equal(life_stock_left(l.item), 1);
    publish_again(&l, ob, b);
    WAIT_UNTIL(life_cons_metric(&l, "seckill_consumer_duplicates_skipped_total") > dups, 15000, ok);
    if (!ok)
        fail_msg("B's order published again was not counted a duplicate; see %s", l.clog[0]);
    assert_int_equal(orders_of(l.item, b), 0);
    assert_true(refused_no_stock(ob));
    assert_int_equal(life_stock_left(l.item), 1);
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_STOCK), 1);
    order_status_says(&l, ob, "\"status\":\"refused\"");

    /* The returned unit is C's. */
    WAIT_UNTIL(order(l.port, c, l.item) == 202, 5000, ok);
    if (!ok)
        fail_msg("buyer C: %s; see %s", last_resp, l.plog);
    int64_t oc = order_id_of(last_resp);
    WAIT_UNTIL(life_pg_int2("SELECT count(*) FROM orders WHERE order_id = $1 AND user_id = $2 "
                            "AND status = 'pending_payment'",
                            oc, c) == 1,
               15000, ok);
    if (!ok)
        fail_msg("C's order %" PRId64 " is not pending payment; see %s", oc, l.clog[0]);
    assert_int_equal(life_stock_left(l.item), 0);
    assert_int_equal(orders_of(l.item, b), 0);
    assert_true(refused_no_stock(ob));
    life_stop(&l);
}

/* An old order replayed does not move the buyer's pointer back (issue #55,
 * item 5): after expire, buy again, the old order published again alone (as
 * a late redelivery or the sweeper would) and a replay of the topic, the
 * buyer's status by item still shows the new order. Before, the old expired
 * order came back as a duplicate ('c') and took the pointer. */
static void test_replay_keeps_current_order(void **state)
{
    (void)state;
    struct life l;
    char resp[2048], path[96], want[64];
    bool ok;
    life_start(&l, &opts, 1, 1, 1);
    int64_t u = l.user_base;
    if (order(l.port, u, l.item) != 202)
        fail_msg("first order: %s; see %s", last_resp, l.plog);
    int64_t o1 = order_id_of(last_resp);
    WAIT_UNTIL(life_orders_in(l.item, "expired") == 1 && life_returns_done(l.item) == 1, 30000, ok);
    assert_true(ok);
    set_window(l.item, 600);
    WAIT_UNTIL(order(l.port, u, l.item) == 202, 5000, ok);
    if (!ok)
        fail_msg("buying again: %s; see %s", last_resp, l.plog);
    int64_t o2 = order_id_of(last_resp);
    WAIT_UNTIL(life_orders_in(l.item, "pending_payment") == 1, 15000, ok);
    assert_true(ok);
    snprintf(path, sizeof(path), "/api/v1/seckill/%" PRId64 "?user_id=%" PRId64, l.item, u);
    snprintf(want, sizeof(want), "\"order_id\":\"%" PRId64 "\"", o2);
    WAIT_UNTIL(harness_http(l.port, "GET", path, NULL, NULL, resp, sizeof(resp)) == 200 && strstr(resp, want) &&
                   strstr(resp, "pending_payment"),
               10000, ok);
    if (!ok)
        fail_msg("GET %s before the replay: %s", path, resp);
    int64_t dups = life_cons_metric(&l, "seckill_consumer_duplicates_skipped_total");
    publish_again(&l, o1, u);
    WAIT_UNTIL(life_cons_metric(&l, "seckill_consumer_duplicates_skipped_total") > dups, 15000, ok);
    if (!ok)
        fail_msg("the old order published again was not counted a duplicate; see %s", l.clog[0]);
    assert_int_equal(harness_http(l.port, "GET", path, NULL, NULL, resp, sizeof(resp)), 200);
    if (!strstr(resp, want) || !strstr(resp, "pending_payment"))
        fail_msg("GET %s after the old order came again: %s (wanted order %" PRId64 ", pending_payment)",
                 path, resp, o2);
    replay_all(&l);
    assert_int_equal(harness_http(l.port, "GET", path, NULL, NULL, resp, sizeof(resp)), 200);
    if (!strstr(resp, want) || !strstr(resp, "pending_payment"))
        fail_msg("GET %s after the replay: %s (wanted order %" PRId64 ", pending_payment)", path, resp, o2);
    life_stop(&l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expired_units_sell_again),
        cmocka_unit_test(test_return_waits_for_redis),
        cmocka_unit_test(test_paid_windows_dropped),
        cmocka_unit_test(test_return_waits_for_replicas),
        cmocka_unit_test(test_expired_state_in_redis),
        cmocka_unit_test(test_refusal_final_under_replay),
        cmocka_unit_test(test_replay_keeps_current_order),
    };
    harness_filter();
    return cmocka_run_group_tests_name("orderlife", tests, setup, life_teardown);
}
