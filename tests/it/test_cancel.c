/* A buyer's cancel in the consumer (issue #44), against the stack.
 *
 * A cancel travels on the orders topic as the order message with
 * "type":"cancel", signed over a text of its own (common/sale/order.h,
 * ordersig.h); the consumer applies it in a worker's batch, under the
 * buyer's lock and fence, in the batch's transaction (consumer/sink.c,
 * cons_cancel.sql): an order still pending payment is cancelled, its unit
 * goes back to stock_left and to order_returns, and from there to Redis
 * (consumer/outbox.c); anything else changes nothing. Also the other half
 * of the consumer's share of an order's life: an order persisted pending
 * payment is marked 'w' in the item's orders hash with the pay_by
 * PostgreSQL holds (consumer/settle.c, seckill_mark), which the buyers'
 * status calls read.
 *
 * The sink is also driven in-process (its batches, decided one message at a
 * time), and the daemons run as an ACL user of this run with the rules
 * scripts/stack.d/redis.sh gives the consumer, so the test shows those rules
 * let it mark and return units (as tests/it/test_orderlife.c does). Each
 * test has its own item, users, topic and group. */
#include "harness.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bucket.h"
#include "keys.h"
#include "life.h"
#include "ordersig.h"
#include "queue.h"
#include "sale.h"
#include "sink.h"

static char last_resp[512];
/* Each run on a topic and group of its own, with a payments topic: l->kp
 * publishes the cancels, as the producer's cancel call would; l->pay
 * payments, as the shop's payment service. */
static const struct life_opts opts = {
    .name = "cancel", .item_base = 960000000, .user_base = 6000000, .user_span = 256, .payments = true
};

/* --- fixtures ------------------------------------------------------------------ */

static int setup(void **state)
{
    return life_setup(state, "cancel");
}

/* --- what the stores hold --------------------------------------------------------- */

static void pg_exec(const char *sql, int64_t a1, int64_t a2)
{
    if (harness_pg_try(&harness_conf, sql, a1, a2) != 0)
        fail_msg("%s failed", sql);
}

static int64_t returns_of(int64_t item)
{
    return life_pg_int("SELECT count(*) FROM order_returns WHERE item_id = $1", item);
}

static const char *status_of(int64_t order_id, char *buf, size_t len)
{
    char s[24];
    snprintf(s, sizeof(s), "%" PRId64, order_id);
    const char *p[] = { s };
    PGconn *pg = harness_pg(&harness_conf);
    PGresult *r = PQexecParams(pg, "SELECT status FROM orders WHERE order_id = $1", 1, NULL, p, NULL, NULL, 0);
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    snprintf(buf, len, "%s", PQntuples(r) ? PQgetvalue(r, 0, 0) : "(none)");
    PQclear(r);
    PQfinish(pg);
    return buf;
}

static bool status_is(int64_t order_id, const char *want)
{
    char b[32];
    return strcmp(status_of(order_id, b, sizeof(b)), want) == 0;
}

/* The pay_by PostgreSQL holds for an order, in ms as the consumer reports it. */
static int64_t pay_by_ms(int64_t order_id)
{
    return life_pg_int("SELECT (extract(epoch FROM pay_by) * 1000)::bigint FROM orders WHERE order_id = $1",
                       order_id);
}

/* The order's state in the orders hash of the item's slot salt (its own:
 * BUCKET_HOME) ("USER|S|RESERVED|SETTLED|DETAIL"): its letter (0 when
 * absent) and DETAIL as a number. */
static char hash_state_at(int64_t item, int salt, int64_t order_id, int64_t *detail)
{
    char k[KEYS_MAX];
    char st = 0;
    assert_true(keys_item_at(k, sizeof(k), harness_conf.redis.key_prefix, item, salt, KEYS_ITEM_ORDERS) > 0);
    redisContext *rc = harness_redis(&harness_conf);
    redisReply *r = harness_cmd(rc, "HGET %s o:%" PRId64, k, order_id);
    *detail = 0;
    if (r->type == REDIS_REPLY_STRING) {
        const char *p = strchr(r->str, '|');
        if (p && p[1] && p[2] == '|') {
            st = p[1];
            const char *last = strrchr(r->str, '|');
            *detail = strtoll(last + 1, NULL, 10);
        }
    }
    freeReplyObject(r);
    redisFree(rc);
    return st;
}

static char hash_state(int64_t item, int64_t order_id, int64_t *detail)
{
    return hash_state_at(item, BUCKET_HOME, order_id, detail);
}

/* --- the sink in-process ------------------------------------------------------------ */

/* An item of stock units whose buyers have pay_s seconds to pay (0: none). */
static int64_t sink_item(int64_t stock, int pay_s)
{
    int64_t item = life_item_id(opts.item_base);
    pg_exec("INSERT INTO items (item_id, name, stock_total, stock_left) VALUES ($1, 'cancel test', $2, $2)", item,
            stock);
    pg_exec("UPDATE items SET pay_within_s = $2 WHERE item_id = $1", item, pay_s);
    return item;
}

static int write_batch(struct sink *s, struct order *o, struct sink_order *so, int n, int64_t fence)
{
    char err[256];
    for (int i = 0; i < n; i++)
        so[i] = (struct sink_order){ &o[i], fence, 0, 0 };
    int st = sink_write(s, so, (size_t)n, NULL, NULL, NULL, err, sizeof(err));
    if (st != SINK_OK)
        fail_msg("sink_write: %d: %s", st, err);
    return st;
}

static struct order cancel_of(const struct order *o)
{
    struct order c = *o;
    c.kind = ORDER_CANCEL;
    return c;
}

/* One batch decides each message in arrival order: an order and its cancel
 * (the cancel sees the order its batch inserted), an order of an item
 * without a payment window and its cancel (final: nothing to cancel), a
 * cancel of an order that does not exist, one naming another buyer; each
 * order's pay_by is the one PostgreSQL holds; the unit of the cancelled
 * order is back in stock_left and recorded once in order_returns. Then two
 * cancels of one order in a batch apply once, a redelivered batch finds its
 * orders with their windows, a cancel replayed changes nothing, and a
 * cancel under a stale fence writes nothing. */
static void test_sink_cancels(void **state)
{
    (void)state;
    char err[256];
    struct sink *s = NULL;
    int64_t w = sink_item(5, 600), f = sink_item(5, 0);
    int64_t ob = (1LL << 41) + ((int64_t)util_rand_below(1ULL << 20) << 20);
    int64_t ub = 810000000000LL + (int64_t)util_rand_below(9999999999ULL);
    int64_t fence = util_wall_ms() * 1000;
    assert_int_equal(sink_open(&harness_conf, "test-cancel-sink", &s, err, sizeof(err)), 0);

    struct order a = { ob + 1, ub + 1, w, 1, 1000, ORDER_BUY, "" };
    struct order b = { ob + 2, ub + 2, w, 1, 1000, ORDER_BUY, "" };
    struct order c = { ob + 3, ub + 3, f, 1, 1000, ORDER_BUY, "" };
    struct order d = { ob + 4, ub + 4, w, 1, 1000, ORDER_BUY, "" };
    struct order o[] = {
        a, cancel_of(&a), b, c, cancel_of(&c),
        { ob + 9, ub + 5, w, 1, 1000, ORDER_CANCEL, "" }, /* no such order */
        { ob + 2, ub + 5, w, 1, 1000, ORDER_CANCEL, "" }, /* b's id, another buyer */
        d,
    };
    enum { N = sizeof(o) / sizeof(o[0]) };
    const int want[N] = { CMSG_INSERTED,    CMSG_CANCELLED,   CMSG_INSERTED,    CMSG_INSERTED,
                          CMSG_CANCEL_NOOP, CMSG_CANCEL_NOOP, CMSG_CANCEL_NOOP, CMSG_INSERTED };
    struct sink_order so[N];
    write_batch(s, o, so, N, fence);
    for (int i = 0; i < N; i++)
        if (so[i].outcome != want[i])
            fail_msg("message %d: outcome %d, want %d", i, so[i].outcome, want[i]);
    assert_int_equal(so[0].pay_by_ms, 0); /* cancelled by its batch: no longer pending */
    assert_true(so[2].pay_by_ms > util_wall_ms());
    assert_int_equal(so[2].pay_by_ms, pay_by_ms(b.order_id));
    assert_int_equal(so[7].pay_by_ms, pay_by_ms(d.order_id));
    assert_int_equal(so[3].pay_by_ms, 0); /* final */
    for (int i = 0; i < N; i++)
        if (o[i].kind == ORDER_CANCEL)
            assert_int_equal(so[i].pay_by_ms, 0);
    assert_true(status_is(a.order_id, "cancelled"));
    assert_int_equal(
        life_pg_int("SELECT count(*) FROM orders WHERE order_id = $1 AND status_reason = 'cancelled by "
                    "its buyer' AND status_changed_at IS NOT NULL AND pay_by IS NOT NULL",
                    a.order_id),
        1);
    assert_true(status_is(b.order_id, "pending_payment"));
    assert_true(status_is(c.order_id, "final"));
    assert_int_equal(life_stock_left(w), 5 - 2); /* a, b, d took one each; a's came back */
    assert_int_equal(life_stock_left(f), 4);
    assert_int_equal(returns_of(w), 1);
    assert_int_equal(returns_of(f), 0);
    /* (whether a consumer sent it to Redis yet does not matter here) */
    assert_int_equal(
        life_pg_int2("SELECT count(*) FROM order_returns WHERE order_id = $1 AND user_id = $2 AND "
                     "reason = 'cancelled'",
                     a.order_id, a.user_id),
        1);

    /* Two cancels of b in one batch: the first applies, the second finds it
     * cancelled. */
    fence++;
    struct order two[] = { cancel_of(&b), cancel_of(&b) };
    struct sink_order so2[2];
    write_batch(s, two, so2, 2, fence);
    assert_int_equal(so2[0].outcome, CMSG_CANCELLED);
    assert_int_equal(so2[1].outcome, CMSG_CANCEL_NOOP);
    assert_int_equal(life_stock_left(w), 5 - 1);
    assert_int_equal(returns_of(w), 2);

    /* The first batch again (a redelivery): the orders are there, each with
     * its window while it is still pending (d) and none once it is not (a,
     * b cancelled); the cancels change nothing. */
    fence++;
    write_batch(s, o, so, N, fence);
    for (int i = 0; i < N; i++) {
        int expect = o[i].kind == ORDER_CANCEL ? CMSG_CANCEL_NOOP : CMSG_DUPLICATE;
        if (so[i].outcome != expect)
            fail_msg("redelivered message %d: outcome %d, want %d", i, so[i].outcome, expect);
    }
    assert_int_equal(so[7].pay_by_ms, pay_by_ms(d.order_id));
    assert_int_equal(so[0].pay_by_ms, 0);
    assert_int_equal(so[2].pay_by_ms, 0);
    assert_int_equal(so[3].pay_by_ms, 0);
    assert_int_equal(life_stock_left(w), 5 - 1);
    assert_int_equal(life_stock_left(f), 4);
    assert_int_equal(returns_of(w), 2);

    /* A paid order is not cancelled; a stale fence writes nothing. */
    pg_exec("UPDATE orders SET status = 'paid' WHERE order_id = $1", d.order_id, 0);
    fence++;
    struct order cd = cancel_of(&d);
    write_batch(s, &cd, so, 1, fence);
    assert_int_equal(so[0].outcome, CMSG_CANCEL_NOOP);
    assert_true(status_is(d.order_id, "paid"));
    pg_exec("UPDATE orders SET status = 'pending_payment' WHERE order_id = $1", d.order_id, 0);
    write_batch(s, &cd, so, 1, fence - 10);
    assert_int_equal(so[0].outcome, CMSG_RETRY);
    assert_true(status_is(d.order_id, "pending_payment"));
    assert_int_equal(life_stock_left(w), 5 - 1);
    assert_int_equal(returns_of(w), 2);
    sink_close(s);
    for (int i = 1; i <= 5; i++)
        pg_exec("DELETE FROM user_fences WHERE user_id = $1", ub + i, 0);
    life_pg_drop(w);
    life_pg_drop(f);
}

/* --- a producer and consumers ---------------------------------------------------- */

#define CANCELS_APPLIED "seckill_consumer_cancels_total{result=\"applied\"}"
#define CANCELS_NOOP "seckill_consumer_cancels_total{result=\"noop\"}"

/* How a cancel is signed: by a producer key, not at all, or with the MAC of
 * the order it names (a forger's reuse: the texts differ, ordersig.h). */
enum how_signed { SIGNED, UNSIGNED, ORDER_MAC };

/* Publish the buyer's cancel of order_id on the orders topic, keyed by its
 * user, as the producer's cancel call does. */
static void cancel_publish(struct life *l, int64_t order_id, int64_t u, enum how_signed how)
{
    struct order o = { order_id, u, l->item, 1, util_wall_ms(), ORDER_CANCEL, "" };
    char buf[ORDER_MSG_MAX], key[ORDER_ID_STR_MAX];
    if (how == SIGNED) {
        assert_int_equal(osig_sign(&o), 0);
    } else if (how == ORDER_MAC) {
        o.kind = ORDER_BUY;
        assert_int_equal(osig_sign(&o), 0);
        o.kind = ORDER_CANCEL;
    }
    int n = order_encode(&o, buf, sizeof(buf));
    assert_true(n > 0);
    snprintf(key, sizeof(key), "%" PRId64, u);
    life_produce(l->kp, l->c.kafka.topic, key, buf, (size_t)n);
    rd_kafka_poll(l->kp, 0);
}

/* The shop's payment of order_id on the payments topic, keyed by its user
 * (consumer/payments.h). */
static void payment_publish(struct life *l, int64_t order_id, int64_t u)
{
    char ref[32];
    snprintf(ref, sizeof(ref), "race-%" PRId64, order_id);
    life_payment(l->pay, l->c.kafka.payments_topic, order_id, u, util_wall_ms(), ref);
    rd_kafka_poll(l->pay, 0);
}

/* A buyer's order through the producer, persisted pending payment: its id. */
static int64_t buy_pending(struct life *l, int64_t u)
{
    bool ok;
    int64_t id = -1;
    int st = harness_order(l->port, u, l->item, last_resp, sizeof(last_resp));
    if (st != 202)
        fail_msg("buyer %" PRId64 ": %d %s; see %s", u, st, last_resp, l->plog);
    WAIT_UNTIL(
        (id = life_pg_int2("SELECT order_id FROM orders WHERE item_id = $1 AND user_id = $2 AND status = "
                           "'pending_payment'",
                           l->item, u)) > 0,
        15000, ok);
    if (!ok)
        fail_msg("the order of buyer %" PRId64 " was not persisted pending payment; see %s", u, l->clog[0]);
    return id;
}

/* The status hash says 'w' with the pay_by PostgreSQL holds, to the ms, and
 * so does the producer's status call (pending_payment, pay_by). */
static void expect_waiting(struct life *l, int64_t order_id)
{
    bool ok;
    int st = 0;
    char path[64], t[40], want_text[64];
    int64_t detail = 0, want = pay_by_ms(order_id);
    assert_true(want > util_wall_ms());
    WAIT_UNTIL(hash_state(l->item, order_id, &detail) == 'w', 10000, ok);
    if (!ok)
        fail_msg("order %" PRId64 ": the orders hash says '%c', not 'w'; see %s", order_id,
                 hash_state(l->item, order_id, &detail), l->clog[0]);
    assert_int_equal(detail, want);
    snprintf(path, sizeof(path), "/api/v1/orders/%" PRId64, order_id);
    util_format_time_ms(want, t, sizeof(t));
    snprintf(want_text, sizeof(want_text), "\"pay_by\":\"%s\"", t);
    char *body = sale_http_get(l->port, path, &st);
    if (st != 200 || !body || !strstr(body, "\"status\":\"pending_payment\"") || !strstr(body, want_text))
        fail_msg("GET %s: %d %s, want pending_payment and %s", path, st, body ? body : "", want_text);
    free(body);
}

/* The buyer's cancel through the producer's call (auth none: the caller
 * names itself): 202 once Kafka holds it. */
static void cancel_call(struct life *l, int64_t order_id, int64_t u)
{
    char path[96];
    snprintf(path, sizeof(path), "/api/v1/orders/%" PRId64 "/cancel?user_id=%" PRId64, order_id, u);
    int st = harness_http(l->port, "POST", path, NULL, NULL, last_resp, sizeof(last_resp));
    if (st != 202 || !strstr(last_resp, "cancelling"))
        fail_msg("POST %s: %d %s; see %s", path, st, last_resp, l->plog);
}

/* The producer's status call for the order says want (its JSON word). */
static void order_says(struct life *l, int64_t order_id, const char *want)
{
    char path[64], w[64];
    int st = 0;
    snprintf(path, sizeof(path), "/api/v1/orders/%" PRId64, order_id);
    snprintf(w, sizeof(w), "\"status\":\"%s\"", want);
    char *body = sale_http_get(l->port, path, &st);
    if (st != 200 || !body || !strstr(body, w))
        fail_msg("GET %s: %d %s, want %s", path, st, body ? body : "", w);
    free(body);
}

/* Every key of the item's own slot and of its k buckets deleted, as when
 * Redis lost them. */
static void drop_slots(int64_t item, const int *salts, int k)
{
    static const enum keys_item_part parts[] = { KEYS_ITEM_STOCK,    KEYS_ITEM_BUYERS, KEYS_ITEM_PENDING,
                                                 KEYS_ITEM_UNPUB,    KEYS_ITEM_WINDOW, KEYS_ITEM_ORDERS,
                                                 KEYS_ITEM_RETURNED, KEYS_ITEM_XOUT,   KEYS_ITEM_XIN };
    redisContext *rc = harness_redis(&harness_conf);
    for (int i = -1; i < k; i++)
        for (size_t p = 0; p < ARRAY_SIZE(parts); p++) {
            char key[KEYS_MAX];
            assert_true(keys_item_at(key, sizeof(key), harness_conf.redis.key_prefix, item,
                                     i < 0 ? BUCKET_HOME : salts[i], parts[p]) > 0);
            freeReplyObject(harness_cmd(rc, "DEL %s", key));
        }
    redisFree(rc);
}

/* seckillctl item load of the run's item: exit 0. */
static void item_load(struct life *l)
{
    char sid[24], *out = NULL;
    snprintf(sid, sizeof(sid), "%" PRId64, l->item);
    const char *args[] = { "-c", l->cfgpath[0], "item", "load", "--id", sid, "--wait-ms", "0", NULL };
    int st = harness_run(&out, "seckillctl", args, 60000);
    if (st != 0)
        fail_msg("seckillctl item load --id %s: exit %d:\n%s", sid, st, out);
    free(out);
}

/* seckillctl reconcile of the run's item: every check passes (exit 0). */
static void recon_clean(struct life *l)
{
    char sid[24], *out = NULL;
    snprintf(sid, sizeof(sid), "%" PRId64, l->item);
    const char *args[] = { "-c", l->cfgpath[0], "reconcile", "--item", sid, NULL };
    int st = harness_run(&out, "seckillctl", args, 60000);
    if (st != 0)
        fail_msg("seckillctl reconcile --item %s: exit %d:\n%s", sid, st, out);
    free(out);
}

/* The "total" row of a replay summary: read inserted present rejected dead
 * cancelled cancel-noop. */
static void replay_totals(const char *out, int64_t v[7])
{
    const char *p = strstr(out, "\n    total");
    if (!p || sscanf(p + 10, "%" SCNd64 " %" SCNd64 " %" SCNd64 " %" SCNd64 " %" SCNd64 " %" SCNd64 " %" SCNd64,
                     &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6]) != 7)
        fail_msg("no totals in the replay output:\n%s", out);
}

/* --- the tests ---------------------------------------------------------------------- */

/* A buyer's order of an item with a payment window is persisted pending and
 * shown 'w' with its pay_by; the buyer's signed cancel cancels it: its unit
 * back in stock_left once, recorded in order_returns, back in Redis, and the
 * buyer may buy again, and cancel again through the producer's call. The
 * same cancel again changes nothing; a cancel of a paid order changes
 * nothing; a cancel no producer signed, or carrying its order's MAC, goes to
 * the dead-letter topic and changes nothing; a replay of the topic changes
 * nothing. */
static void test_cancel_pending_order(void **state)
{
    (void)state;
    enum { STOCK = 3 };
    struct life l;
    bool ok;
    int64_t detail;
    life_start(&l, &opts, 1, STOCK, 600);
    int64_t u0 = l.user_base, u1 = l.user_base + 1, u2 = l.user_base + 2;

    int64_t a = buy_pending(&l, u0);
    expect_waiting(&l, a);
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_STOCK), STOCK - 1);
    assert_int_equal(life_stock_left(l.item), STOCK - 1);

    /* The cancel: cancelled in PostgreSQL, the unit back in both stores. */
    cancel_publish(&l, a, u0, SIGNED);
    WAIT_UNTIL(status_is(a, "cancelled"), 15000, ok);
    if (!ok)
        fail_msg("order %" PRId64 " not cancelled; see %s", a, l.clog[0]);
    assert_int_equal(life_stock_left(l.item), STOCK);
    assert_int_equal(
        life_pg_int2("SELECT count(*) FROM order_returns WHERE order_id = $1 AND user_id = $2 AND "
                     "reason = 'cancelled'",
                     a, u0),
        1);
    WAIT_UNTIL(life_returns_done(l.item) == 1 && life_redis_of(l.item, KEYS_ITEM_STOCK) == STOCK, 15000, ok);
    if (!ok)
        fail_msg("returns done %lld, Redis stock %lld; see %s", (long long)life_returns_done(l.item),
                 life_redis_of(l.item, KEYS_ITEM_STOCK), l.clog[0]);
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_RETURNED), 1);
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_BUYERS), 0);
    WAIT_UNTIL(life_cons_metric(&l, CANCELS_APPLIED) == 1, 10000, ok);
    assert_true(ok);
    /* The outbox marks what it returned 'k' with the cancel's time
     * (consumer/outbox.c), before the return is done. */
    char st = hash_state(l.item, a, &detail);
    if (st != 'k')
        fail_msg("order %" PRId64 ": the orders hash says '%c' after its cancel, not 'k'", a, st);
    assert_int_equal(detail,
                     life_pg_int("SELECT (extract(epoch FROM status_changed_at) * 1000)::bigint FROM orders "
                                 "WHERE order_id = $1",
                                 a));

    /* The same cancel twice more: nothing changes. */
    cancel_publish(&l, a, u0, SIGNED);
    cancel_publish(&l, a, u0, SIGNED);
    WAIT_UNTIL(life_cons_metric(&l, CANCELS_NOOP) == 2, 15000, ok);
    if (!ok)
        fail_msg("cancels noop: %lld; see %s", (long long)life_cons_metric(&l, CANCELS_NOOP), l.clog[0]);
    assert_int_equal(life_cons_metric(&l, CANCELS_APPLIED), 1);
    assert_int_equal(life_stock_left(l.item), STOCK);
    assert_int_equal(returns_of(l.item), 1);
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_STOCK), STOCK);

    /* The buyer buys again (sale.rebuy_after_cancel), a new order, and
     * cancels it through the producer's call. */
    int64_t a2 = buy_pending(&l, u0);
    assert_true(a2 != a);
    expect_waiting(&l, a2);
    cancel_call(&l, a2, u0);
    WAIT_UNTIL(status_is(a2, "cancelled") && life_cons_metric(&l, CANCELS_APPLIED) == 2, 15000, ok);
    if (!ok)
        fail_msg("order %" PRId64 " not cancelled through the call; see %s", a2, l.clog[0]);
    assert_int_equal(life_stock_left(l.item), STOCK);
    assert_int_equal(returns_of(l.item), 2);
    WAIT_UNTIL(life_redis_of(l.item, KEYS_ITEM_STOCK) == STOCK, 15000, ok);
    assert_true(ok);

    /* A paid order is not cancelled. */
    int64_t b = buy_pending(&l, u1);
    pg_exec("UPDATE orders SET status = 'paid', status_changed_at = now() WHERE order_id = $1", b, 0);
    cancel_publish(&l, b, u1, SIGNED);
    WAIT_UNTIL(life_cons_metric(&l, CANCELS_NOOP) == 3, 15000, ok);
    assert_true(ok);
    assert_true(status_is(b, "paid"));
    assert_int_equal(life_stock_left(l.item), STOCK - 1);
    assert_int_equal(returns_of(l.item), 2);

    /* A cancel no producer signed, and one with its order's MAC: dead
     * letters, counted as unsigned; the order stays pending. */
    int64_t c = buy_pending(&l, u2);
    cancel_publish(&l, c, u2, UNSIGNED);
    cancel_publish(&l, c, u2, ORDER_MAC);
    WAIT_UNTIL(life_cons_metric(&l, "seckill_consumer_dead_lettered_total") == 2, 15000, ok);
    if (!ok)
        fail_msg("dead letters: %lld; see %s",
                 (long long)life_cons_metric(&l, "seckill_consumer_dead_lettered_total"), l.clog[0]);
    assert_int_equal(life_cons_metric(&l, "seckill_consumer_orders_unsigned_total"), 2);
    assert_true(status_is(c, "pending_payment"));
    if (life_cons_metric(&l, CANCELS_APPLIED) != 2 || life_cons_metric(&l, CANCELS_NOOP) != 3)
        fail_msg("cancels: applied %lld, noop %lld", (long long)life_cons_metric(&l, CANCELS_APPLIED),
                 (long long)life_cons_metric(&l, CANCELS_NOOP));
    assert_int_equal(life_stock_left(l.item), STOCK - 2);
    assert_int_equal(returns_of(l.item), 2);

    /* A replay of the topic: every order present, every cancel a noop, the
     * dead letters again dead letters; nothing changes. */
    char *out = NULL;
    int64_t v[7];
    const char *rargs[] = { "-c", l.cfgpath[0], "--replay", "--from-beginning", NULL };
    int rst = harness_run(&out, "seckill-consumer", rargs, 60000);
    if (rst != 0)
        fail_msg("replay exit %d: %s", rst, out);
    replay_totals(out, v);
    free(out);
    assert_int_equal(v[0], 4 + 5 + 2); /* read: 4 orders, 5 signed cancels, 2 dead letters */
    assert_int_equal(v[1], 0);         /* inserted */
    assert_int_equal(v[2], 4);         /* present */
    assert_int_equal(v[3], 0);         /* rejected */
    assert_int_equal(v[4], 2);         /* dead-lettered */
    assert_int_equal(v[5], 0);         /* cancelled */
    assert_int_equal(v[6], 5);         /* cancel-noop: a's three, a2's, b's */
    assert_true(status_is(a, "cancelled"));
    assert_true(status_is(a2, "cancelled"));
    assert_true(status_is(b, "paid"));
    assert_true(status_is(c, "pending_payment"));
    assert_int_equal(life_stock_left(l.item), STOCK - 2);
    assert_int_equal(returns_of(l.item), 2);
    life_stop(&l);
}

/* Cancels racing the expiry: N orders with a short window, each cancelled by
 * its buyer a little before, at, or after its pay_by, while two consumers
 * expire what is due. Each order ends cancelled or expired, and is returned
 * exactly once: one order_returns row per order, whose reason is its status,
 * every unit back in stock_left and in Redis. */
static void test_cancel_races_expiry(void **state)
{
    (void)state;
    enum { N = 200, PAY_S = 4 };
    static const int offset_ms[] = { -150, 0, 40, 250 };
    struct life l;
    bool ok;
    int64_t ids[N], users[N], due[N], at[N];
    int ord[N];
    life_start(&l, &opts, 2, N, PAY_S);
    int64_t t0 = util_mono_ms();
    for (int i = 0; i < N; i++) {
        int st = harness_order(l.port, l.user_base + i, l.item, last_resp, sizeof(last_resp));
        if (st != 202)
            fail_msg("buyer %d: %d %s; see %s", i, st, last_resp, l.plog);
    }
    WAIT_UNTIL(life_pg_int("SELECT count(*) FROM orders WHERE item_id = $1", l.item) == N, 20000, ok);
    if (!ok)
        fail_msg("%lld of %d orders persisted; see %s",
                 (long long)life_pg_int("SELECT count(*) FROM orders WHERE item_id = $1", l.item), N,
                 l.clog[0]);

    printf("# %d orders persisted in %lld ms\n", N, (long long)(util_mono_ms() - t0));
    /* Each order's buyer and pay_by, earliest first. */
    life_orders_by_pay_by(l.item, N, ids, users, due);

    /* Each cancel published near its order's pay_by, in the order of those
     * times: some before the expiry can take the order, some as it does,
     * some after. */
    int64_t late = 0;
    for (int i = 0; i < N; i++) {
        ord[i] = i;
        at[i] = due[i] + offset_ms[i % ARRAY_SIZE(offset_ms)];
    }
    for (int i = 1; i < N; i++) /* by at: insertion sort, the input is nearly sorted */
        for (int j = i; j > 0 && at[ord[j - 1]] > at[ord[j]]; j--) {
            int t = ord[j];
            ord[j] = ord[j - 1];
            ord[j - 1] = t;
        }
    for (int k = 0; k < N; k++) {
        int i = ord[k];
        int64_t now = util_wall_ms();
        if (at[i] > now)
            util_sleep_ms(at[i] - now);
        else
            late++;
        cancel_publish(&l, ids[i], users[i], SIGNED);
    }
    rd_kafka_flush(l.kp, 10000);
    WAIT_UNTIL(life_cons_metric(&l, CANCELS_APPLIED) + life_cons_metric(&l, CANCELS_NOOP) == N &&
                   life_orders_in(l.item, "pending_payment") == 0,
               30000, ok);
    if (!ok)
        fail_msg("cancels settled %lld of %d, %lld orders still pending; see %s",
                 (long long)(life_cons_metric(&l, CANCELS_APPLIED) + life_cons_metric(&l, CANCELS_NOOP)), N,
                 (long long)life_orders_in(l.item, "pending_payment"), l.clog[0]);
    int64_t cancelled = life_orders_in(l.item, "cancelled"), expired = life_orders_in(l.item, "expired");
    printf("# %d orders: %lld cancelled by their buyers, %lld expired first (%lld cancels published late)\n", N,
           (long long)cancelled, (long long)expired, (long long)late);
    assert_int_equal(cancelled + expired, N);
    assert_int_equal(life_cons_metric(&l, CANCELS_APPLIED), cancelled);
    assert_true(cancelled > 0);
    assert_true(expired > 0);
    /* Returned exactly once each, under the reason its status says. */
    assert_int_equal(returns_of(l.item), N);
    assert_int_equal(
        life_pg_int("SELECT count(*) FROM orders o JOIN order_returns r USING (order_id) WHERE o.item_id = "
                    "$1 AND r.reason = o.status",
                    l.item),
        N);
    assert_int_equal(life_stock_left(l.item), N);
    WAIT_UNTIL(life_returns_done(l.item) == N && life_redis_of(l.item, KEYS_ITEM_STOCK) == N, 20000, ok);
    if (!ok)
        fail_msg("returns done %lld of %d, Redis stock %lld; see %s", (long long)life_returns_done(l.item), N,
                 life_redis_of(l.item, KEYS_ITEM_STOCK), l.clog[0]);
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_RETURNED), N);
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_ORDERS), N); /* given_back */
    assert_int_equal(life_stock_left(l.item), N);
    /* The buyers' status says what PostgreSQL decided: 'k' or 'x'. */
    int agree = 0;
    for (int i = 0; i < N; i++) {
        int64_t detail;
        char st = hash_state(l.item, ids[i], &detail), pgst[32];
        status_of(ids[i], pgst, sizeof(pgst));
        agree += (st == 'k' && strcmp(pgst, "cancelled") == 0) || (st == 'x' && strcmp(pgst, "expired") == 0);
    }
    assert_int_equal(agree, N);
    life_stop(&l);
}

/* A cancel racing a payment: N orders waiting for their payment (a window
 * no test outlasts), and for each, at the same moment, its buyer's cancel on
 * the orders topic and the shop's payment on the payments topic, which go
 * through two different paths of the consumer (the worker pool, the payments
 * thread) under the same user lock and fence. Each order ends exactly one
 * way: paid (its cancel changed nothing, no unit given back) or cancelled
 * (its payment recorded late, for a refund, and its unit back once). */
static void test_cancel_races_payment(void **state)
{
    (void)state;
    enum { N = 200 };
    struct life l;
    bool ok;
    int64_t ids[N];
    life_start(&l, &opts, 1, N, 3600);
    for (int i = 0; i < N; i++)
        ids[i] = buy_pending(&l, l.user_base + i);
    for (int i = 0; i < N; i++) {
        /* which goes first alternates; both leave before either is applied */
        if (i % 2) {
            cancel_publish(&l, ids[i], l.user_base + i, SIGNED);
            payment_publish(&l, ids[i], l.user_base + i);
        } else {
            payment_publish(&l, ids[i], l.user_base + i);
            cancel_publish(&l, ids[i], l.user_base + i, SIGNED);
        }
    }
    rd_kafka_flush(l.kp, 10000);
    rd_kafka_flush(l.pay, 10000);
    WAIT_UNTIL(life_orders_in(l.item, "pending_payment") == 0 &&
                   life_cons_metric(&l, CANCELS_APPLIED) + life_cons_metric(&l, CANCELS_NOOP) == N &&
                   life_cons_metric(&l, "seckill_consumer_payments_applied_total") +
                           life_cons_metric(&l, "seckill_consumer_late_payments_total") ==
                       N,
               60000, ok);
    if (!ok)
        fail_msg("still pending %lld; cancels %lld; payments %lld applied, %lld late; see %s",
                 (long long)life_orders_in(l.item, "pending_payment"),
                 (long long)(life_cons_metric(&l, CANCELS_APPLIED) + life_cons_metric(&l, CANCELS_NOOP)),
                 (long long)life_cons_metric(&l, "seckill_consumer_payments_applied_total"),
                 (long long)life_cons_metric(&l, "seckill_consumer_late_payments_total"), l.clog[0]);
    int64_t paid = life_orders_in(l.item, "paid"), cancelled = life_orders_in(l.item, "cancelled");
    printf("# %d orders: %lld paid, %lld cancelled\n", N, (long long)paid, (long long)cancelled);
    assert_int_equal(paid + cancelled, N);
    assert_int_equal(life_cons_metric(&l, CANCELS_APPLIED), cancelled);
    assert_int_equal(life_cons_metric(&l, "seckill_consumer_payments_applied_total"), paid);
    /* every cancelled order's payment kept for a refund, none of a paid one */
    assert_int_equal(
        life_pg_int("SELECT count(*) FROM late_payments p JOIN orders o USING (order_id) WHERE o.item_id = "
                    "$1 AND o.status = 'cancelled' AND p.status_then = 'cancelled'",
                    l.item),
        cancelled);
    assert_int_equal(
        life_pg_int(
            "SELECT count(*) FROM late_payments p JOIN orders o USING (order_id) WHERE o.item_id = $1",
            l.item),
        cancelled);
    /* units back for the cancelled only, once each */
    assert_int_equal(returns_of(l.item), cancelled);
    assert_int_equal(
        life_pg_int("SELECT count(*) FROM order_returns r JOIN orders o USING (order_id) WHERE o.item_id = "
                    "$1 AND o.status <> 'cancelled'",
                    l.item),
        0);
    assert_int_equal(life_stock_left(l.item), cancelled);
    WAIT_UNTIL(life_returns_done(l.item) == cancelled && life_redis_of(l.item, KEYS_ITEM_STOCK) == cancelled,
               20000, ok);
    if (!ok)
        fail_msg("returns done %lld of %lld, Redis stock %lld; see %s", (long long)life_returns_done(l.item),
                 (long long)cancelled, life_redis_of(l.item, KEYS_ITEM_STOCK), l.clog[0]);
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_RETURNED), cancelled);
    life_stop(&l);
}


/* An item in two buckets with a payment window (issue #57): each order's
 * state is kept in its buyer's bucket (waiting, paid, cancelled, expired,
 * each read back by the status call), and a unit given back by a cancel or
 * an expiry goes to the reserve, the item's own slot, never to the bucket
 * of the buyer who gave it up; that buyer leaves their bucket's buyers,
 * recorded once at both ends, and buys again. reconcile finds it all
 * consistent. */
static void test_order_life_in_buckets(void **state)
{
    (void)state;
    enum { STOCK = 3 };
    struct life_opts o = opts;
    struct life l;
    bool ok;
    int64_t detail, u[3], oid[3];
    int salts[BUCKET_MAX] = { 0, 1 }, b[3];
    o.buckets = 2;
    life_start(&l, &o, 1, STOCK, 600);
    {
        /* the salts as seckillctl placed them (one primary: 0 and 1) */
        char win[KEYS_MAX];
        int k = 0;
        keys_item(win, sizeof(win), harness_conf.redis.key_prefix, l.item, KEYS_ITEM_WINDOW);
        redisContext *rc = harness_redis(&harness_conf);
        redisReply *r = harness_cmd(rc, "HGET %s buckets", win);
        assert_int_equal(r->type, REDIS_REPLY_STRING);
        assert_int_equal(bucket_parse(r->str, salts, &k), 0);
        assert_int_equal(k, 2);
        freeReplyObject(r);
        redisFree(rc);
    }
    /* Buyers of bucket 0, bucket 1, bucket 0. */
    for (int i = 0, want[3] = { 0, 1, 0 }; i < 3; i++) {
        u[i] = i ? u[i - 1] + 1 : l.user_base;
        while (bucket_of(u[i], 2) != want[i])
            u[i]++;
        b[i] = salts[want[i]];
        oid[i] = buy_pending(&l, u[i]);
        WAIT_UNTIL(hash_state_at(l.item, b[i], oid[i], &detail) == 'w', 10000, ok);
        if (!ok)
            fail_msg("order %" PRId64 " not waiting in its bucket; see %s", oid[i], l.clog[0]);
        assert_int_equal(detail, pay_by_ms(oid[i]));
        assert_int_equal(hash_state(l.item, oid[i], &detail), 0); /* nothing in the item's own slot */
        order_says(&l, oid[i], "pending_payment");
    }
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_STOCK) + life_redis_at(l.item, salts[0], KEYS_ITEM_STOCK) +
                         life_redis_at(l.item, salts[1], KEYS_ITEM_STOCK),
                     0);
    /* Paid: marked in its bucket. */
    payment_publish(&l, oid[0], u[0]);
    WAIT_UNTIL(status_is(oid[0], "paid") && hash_state_at(l.item, b[0], oid[0], &detail) == 'p', 15000, ok);
    if (!ok)
        fail_msg("order %" PRId64 " not paid in its bucket; see %s", oid[0], l.clog[0]);
    order_says(&l, oid[0], "paid");
    /* Cancelled by its buyer: the unit to the reserve, the buyer out of
     * bucket 1 (and recorded there), the state 'k' there. */
    long long gb = life_redis_at(l.item, b[1], KEYS_ITEM_ORDERS);
    cancel_call(&l, oid[1], u[1]);
    WAIT_UNTIL(life_returns_done(l.item) == 1, 15000, ok);
    if (!ok)
        fail_msg("the cancel's return not done; see %s", l.clog[0]);
    assert_true(status_is(oid[1], "cancelled"));
    assert_int_equal(hash_state_at(l.item, b[1], oid[1], &detail), 'k');
    order_says(&l, oid[1], "cancelled");
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_STOCK), 1);
    assert_int_equal(life_redis_at(l.item, b[1], KEYS_ITEM_STOCK), 0);
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_RETURNED), 1);
    assert_int_equal(life_redis_at(l.item, b[1], KEYS_ITEM_RETURNED), 1);
    assert_int_equal(life_redis_at(l.item, b[1], KEYS_ITEM_BUYERS), 0);
    assert_int_equal(life_redis_at(l.item, b[0], KEYS_ITEM_BUYERS), 2);
    assert_int_equal(life_redis_at(l.item, b[1], KEYS_ITEM_ORDERS), gb + 1); /* given_back: the producers' witness */
    /* Expired (its window moved to the past): the same, in bucket 0. */
    pg_exec("UPDATE orders SET pay_by = now() - interval '1 second' WHERE order_id = $1", oid[2], 0);
    pg_exec("UPDATE order_deadlines SET pay_by = now() - interval '1 second' WHERE order_id = $1", oid[2], 0);
    WAIT_UNTIL(life_returns_done(l.item) == 2, 15000, ok);
    if (!ok)
        fail_msg("the expiry's return not done; see %s", l.clog[0]);
    assert_true(status_is(oid[2], "expired"));
    assert_int_equal(hash_state_at(l.item, b[2], oid[2], &detail), 'x');
    order_says(&l, oid[2], "expired");
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_STOCK), 2);
    assert_int_equal(life_redis_at(l.item, b[2], KEYS_ITEM_STOCK), 0);
    assert_int_equal(life_redis_at(l.item, b[2], KEYS_ITEM_BUYERS), 1); /* the payer stays */
    assert_int_equal(life_stock_left(l.item), 2);
    /* Both buyers buy again, from the reserve. */
    oid[1] = buy_pending(&l, u[1]);
    oid[2] = buy_pending(&l, u[2]);
    assert_int_equal(life_redis_of(l.item, KEYS_ITEM_STOCK) + life_redis_at(l.item, salts[0], KEYS_ITEM_STOCK) +
                         life_redis_at(l.item, salts[1], KEYS_ITEM_STOCK),
                     0);
    assert_int_equal(harness_order(l.port, u[0], l.item, last_resp, sizeof(last_resp)), 409);
    recon_clean(&l);
    /* Redis lost the item: item load rebuilds each slot from the database
     * (each bucket's buyers, states and returned orders; the reserve's
     * units), and reconcile finds it consistent again. */
    WAIT_UNTIL(life_orders_in(l.item, "pending_payment") == 2, 15000, ok);
    assert_true(ok);
    drop_slots(l.item, salts, 2);
    item_load(&l);
    assert_int_equal(life_redis_at(l.item, b[1], KEYS_ITEM_RETURNED), 1);
    assert_int_equal(life_redis_at(l.item, b[0], KEYS_ITEM_RETURNED), 1);
    assert_int_equal(life_redis_at(l.item, b[0], KEYS_ITEM_BUYERS), 2);
    assert_int_equal(life_redis_at(l.item, b[1], KEYS_ITEM_BUYERS), 1);
    assert_int_equal(hash_state_at(l.item, b[0], oid[0], &detail), 'p');
    recon_clean(&l);
    life_stop(&l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sink_cancels),
        cmocka_unit_test(test_cancel_pending_order),
        cmocka_unit_test(test_cancel_races_expiry),
        cmocka_unit_test(test_cancel_races_payment),
        cmocka_unit_test(test_order_life_in_buckets),
    };
    harness_filter();
    return cmocka_run_group_tests_name("cancel", tests, setup, life_teardown);
}
