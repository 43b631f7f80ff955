/* The consumer's writer of order states into Redis (consumer/rstate.h),
 * without a Redis: the seckill_mark calls it puts into a batch, read back
 * from the batch (rp_command) through hiredis's reader, argument by
 * argument; what it refuses; and what it reads from a batch that did not
 * run. The calls' answers from a live Redis are in tests/it/test_consumer.c,
 * test_orderlife.c and test_payments.c. */
#include "harness.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"
#include "ostate.h"
#include "rpipe.h"
#include "rstate.h"

#define PREFIX "sktest-rstate"

static struct cfg test_cfg(void)
{
    struct cfg c;
    memset(&c, 0, sizeof(c));
    c.redis.key_prefix = (char *)PREFIX;
    return c;
}

/* Command i of b, parsed as Redis would read it: an array of strings; the
 * caller frees it. *key: the key that routes it. */
static redisReply *command(const struct rp_batch *b, int i, const char **key)
{
    size_t len;
    const char *text = rp_command(b, i, &len, key);
    redisReader *rd = redisReaderCreate();
    void *r = NULL;
    assert_non_null(rd);
    assert_int_equal(redisReaderFeed(rd, text, len), REDIS_OK);
    assert_int_equal(redisReaderGetReply(rd, &r), REDIS_OK);
    assert_non_null(r);
    redisReaderFree(rd);
    assert_int_equal(((redisReply *)r)->type, REDIS_REPLY_ARRAY);
    return r;
}

static const char *arg(const redisReply *c, size_t i)
{
    assert_true(i < c->elements);
    return c->element[i]->str;
}

/* Command i is FCALL seckill_mark on item's orders hash (in the slot of
 * want[0]'s salt) with the rows want[0..n), in that order. */
static void expect_call(const struct rp_batch *b, int i, int64_t item, const struct rs_row *want, size_t n)
{
    char key[KEYS_MAX], v[32];
    const char *route = NULL;
    redisReply *c = command(b, i, &route);
    assert_true(keys_item_at(key, sizeof(key), PREFIX, item, want[0].salt, KEYS_ITEM_ORDERS) > 0);
    assert_int_equal(c->elements, 4 + 3 * n);
    assert_string_equal(arg(c, 0), "FCALL");
    assert_string_equal(arg(c, 1), "seckill_mark");
    assert_string_equal(arg(c, 2), "1");
    assert_string_equal(arg(c, 3), key);
    assert_non_null(route);
    assert_string_equal(route, key); /* routed by the item's orders hash: its slot */
    for (size_t r = 0; r < n; r++) {
        snprintf(v, sizeof(v), "%" PRId64, want[r].order_id);
        assert_string_equal(arg(c, 4 + 3 * r), v);
        snprintf(v, sizeof(v), "%c", ost_letter(want[r].state));
        assert_string_equal(arg(c, 5 + 3 * r), v);
        snprintf(v, sizeof(v), "%" PRId64, want[r].detail_ms);
        assert_string_equal(arg(c, 6 + 3 * r), v);
    }
    freeReplyObject(c);
}

/* Rows of several items, given mixed: one call per item, after what the
 * caller put in the batch before, each with its item's rows in the order
 * given; the batch durable. */
static void test_one_call_per_item(void **state)
{
    (void)state;
    struct cfg c = test_cfg();
    struct rs w;
    struct rp_batch b;
    const struct rs_row rows[] = {
        { 101, 7, OST_PAID, 1700000000001, BUCKET_HOME },
        { 102, 3, OST_PENDING_PAYMENT, 1700000900000, BUCKET_HOME },
        { 103, 7, OST_EXPIRED, 1700000000002, BUCKET_HOME },
        { 104, 5, OST_CANCELLED, 1700000000003, BUCKET_HOME },
        { 101, 7, OST_CANCELLED, 1700000000004, BUCKET_HOME }, /* named twice: both go, in order */
        { 105, 5, OST_PAID, 9223372036854775807, BUCKET_HOME },
    };
    rp_batch_init(&b);
    rs_init(&w, &c);
    rs_begin(&w);
    assert_true(rp_addf(&b, "k", "GET %s", "k") == 0); /* the caller's own call first */
    assert_false(b.durable);
    for (size_t i = 0; i < ARRAY_SIZE(rows); i++)
        assert_int_equal(rs_put(&w, &rows[i]), 0);
    assert_int_equal(rs_add(&w, &b), 3);
    assert_int_equal(b.n, 4);
    assert_true(b.durable);
    {
        const struct rs_row item3[] = { rows[1] }, item5[] = { rows[3], rows[5] },
                            item7[] = { rows[0], rows[2], rows[4] };
        expect_call(&b, 1, 3, item3, 1);
        expect_call(&b, 2, 5, item5, 2);
        expect_call(&b, 3, 7, item7, 3);
    }
    /* The rows went with the calls: nothing more to add. */
    assert_int_equal(rs_add(&w, &b), 0);
    assert_int_equal(b.n, 4);
    rp_batch_free(&b);
    rs_free(&w);
}

/* An item in buckets (bucket.h): each order is marked in its buyer's
 * bucket, one call per slot, each routed by that slot's orders hash; an
 * item without buckets keeps its own slot. */
static void test_one_call_per_slot(void **state)
{
    (void)state;
    struct cfg c = test_cfg();
    struct rs w;
    struct rp_batch b;
    const struct rs_row rows[] = {
        { 201, 9, OST_PAID, 11, 40 },         { 202, 9, OST_EXPIRED, 12, 3 },
        { 203, 9, OST_CANCELLED, 13, 40 },    { 204, 8, OST_PAID, 14, BUCKET_HOME },
        { 205, 9, OST_PENDING_PAYMENT, 15, 3 },
    };
    rp_batch_init(&b);
    rs_init(&w, &c);
    rs_begin(&w);
    for (size_t i = 0; i < ARRAY_SIZE(rows); i++)
        assert_int_equal(rs_put(&w, &rows[i]), 0);
    assert_int_equal(rs_add(&w, &b), 3);
    {
        const struct rs_row home[] = { rows[3] }, s3[] = { rows[1], rows[4] }, s40[] = { rows[0], rows[2] };
        expect_call(&b, 0, 8, home, 1);
        expect_call(&b, 1, 9, s3, 2);
        expect_call(&b, 2, 9, s40, 2);
    }
    rp_batch_free(&b);
    rs_free(&w);
}

/* Calls added one item at a time (settle.c, outbox.c: each after the
 * item's own call) are numbered in that order for rs_done. A new batch
 * starts again from 0. */
static void test_calls_in_turn(void **state)
{
    (void)state;
    struct cfg c = test_cfg();
    struct rs w;
    struct rp_batch b;
    struct rs_said said;
    rp_batch_init(&b);
    rs_init(&w, &c);
    for (int round = 0; round < 2; round++) {
        rp_batch_reset(&b);
        rs_begin(&w);
        for (int64_t item = 1; item <= 3; item++) {
            const struct rs_row r = { 1000 + item, item, OST_EXPIRED, 42, BUCKET_HOME };
            assert_true(rp_addf(&b, "x", "GET %s", "x") >= 0); /* the item's return */
            assert_int_equal(rs_put(&w, &r), 0);
            assert_int_equal(rs_add(&w, &b), 1);
            expect_call(&b, (int)(2 * item - 1), item, &r, 1);
        }
        /* Not run: nothing answered, nothing done. */
        rs_read(&w, &b, &said);
        assert_int_equal(said.calls, 3);
        assert_int_equal(said.answered, 0);
        assert_int_equal(said.done, 0);
        assert_int_equal(said.missing, 0);
        assert_false(said.replicas_short);
        assert_string_equal(said.why, "");
        for (int k = 0; k < 3; k++) {
            assert_false(rs_done(&w, k));
            assert_false(rs_answered(&w, k));
        }
        assert_false(rs_done(&w, 3));
        assert_false(rs_done(&w, -1));
    }
    rp_batch_free(&b);
    rs_free(&w);
}

/* seckill_mark writes the states after the sale alone: any other row is
 * refused, and the rows kept before it still go. */
static void test_refuses_other_states(void **state)
{
    (void)state;
    struct cfg c = test_cfg();
    struct rs w;
    struct rp_batch b;
    const struct rs_row good = { 9, 2, OST_PAID, 5, BUCKET_HOME };
    rp_batch_init(&b);
    rs_init(&w, &c);
    for (int s = -1; s <= OST_NSTATES; s++) {
        const struct rs_row r = { 10, 2, (enum ost_state)s, 5, BUCKET_HOME }, both[] = { good, r };
        bool mark = s >= 0 && s < OST_NSTATES && ost_writer(s) == OST_BY_MARK;
        rs_begin(&w);
        assert_int_equal(rs_put(&w, &good), 0);
        assert_int_equal(rs_put(&w, &r), mark ? 0 : -1);
        assert_int_equal(rs_add(&w, &b), 1);
        expect_call(&b, b.n - 1, 2, both, mark ? 2 : 1);
    }
    /* No rows: no call, and the batch is left as it was. */
    rp_batch_reset(&b);
    b.durable = false;
    rs_begin(&w);
    assert_int_equal(rs_add(&w, &b), 0);
    assert_int_equal(b.n, 0);
    assert_false(b.durable);
    rp_batch_free(&b);
    rs_free(&w);
}

/* A backlog's worth of one item (settle.c keeps up to 100,000): one call,
 * every row in it (seckill_mark reads and writes them in chunks itself). */
static void test_many_rows(void **state)
{
    (void)state;
    enum { N = 5000 };
    struct cfg c = test_cfg();
    struct rs w;
    struct rp_batch b;
    struct rs_row *rows = calloc(N, sizeof(*rows));
    assert_non_null(rows);
    rp_batch_init(&b);
    rs_init(&w, &c);
    rs_begin(&w);
    for (int i = 0; i < N; i++) {
        rows[i] = (struct rs_row){ 1 + i, 77, OST_PENDING_PAYMENT, 100000 + i, BUCKET_HOME };
        assert_int_equal(rs_put(&w, &rows[i]), 0);
    }
    assert_int_equal(rs_add(&w, &b), 1);
    expect_call(&b, 0, 77, rows, N);
    free(rows);
    rp_batch_free(&b);
    rs_free(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_call_per_item),
        cmocka_unit_test(test_one_call_per_slot),
        cmocka_unit_test(test_calls_in_turn),
        cmocka_unit_test(test_refuses_other_states),
        cmocka_unit_test(test_many_rows),
    };
    return cmocka_run_group_tests_name("rstate", tests, NULL, NULL);
}
