/* Transfers between an item's slots (common/sale/xfer.h, issue #57) on the
 * stack's Redis, as the producer's own ACL user runs them: units move once
 * per id; a transfer run again moves nothing more; the giving half alone
 * (a crash between the halves) leaves its units in flight, counted by the
 * source's record and finished by xfer_finish, once; a source gives only
 * what it holds above what it keeps; a receiving slot with no stock is
 * refused and the units stay in flight, not lost. The sum of the stocks and
 * the units in flight never moves. Needs the stack (scripts/stack up). */
#include "harness.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "bucket.h"
#include "keys.h"
#include "rpipe.h"
#include "xfer.h"

#define ITEM 57001

static struct rp *prod; /* as the producer's ACL user */
static redisContext *rc; /* as the stack's user: the test's own reads and writes */

static const char *key(int salt, enum keys_item_part part)
{
    static char k[4][KEYS_MAX];
    static int next;
    char *buf = k[next++ % 4];
    assert_true(keys_item_at(buf, KEYS_MAX, harness_conf.redis.key_prefix, ITEM, salt, part) > 0);
    return buf;
}

static long long stock(int salt)
{
    redisReply *r = harness_cmd(rc, "GET %s", key(salt, KEYS_ITEM_STOCK));
    long long v = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : -1;
    freeReplyObject(r);
    return v;
}

static int setup(void **state)
{
    char err[512];
    harness_setup(state);
    rc = harness_redis(&harness_conf);
    if (rp_open(&harness_conf, CFG_ROLE_PRODUCER, &prod, err, sizeof(err)) != 0) {
        fprintf(stderr, "rp_open as the producer: %s\n", err);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    rp_close(prod);
    redisFree(rc);
    return harness_teardown(state);
}

/* The item's own slot with `home` units, buckets 0 and 1 with none. */
static void fresh(long long home)
{
    for (int salt = BUCKET_HOME; salt <= 1; salt++) {
        freeReplyObject(harness_cmd(rc, "DEL %s %s %s %s", key(salt, KEYS_ITEM_STOCK), key(salt, KEYS_ITEM_XOUT),
                                    key(salt, KEYS_ITEM_XIN), key(salt, KEYS_ITEM_ORDERS)));
        freeReplyObject(harness_cmd(rc, "SET %s %lld", key(salt, KEYS_ITEM_STOCK), salt == BUCKET_HOME ? home : 0));
    }
}

static int64_t move(struct xfer *x)
{
    char err[512];
    int64_t moved = -1;
    if (xfer_move(prod, harness_conf.redis.key_prefix, x, &moved, err, sizeof(err)) != 0)
        fail_msg("xfer_move: %s", err);
    return moved;
}

static struct xfer_tally finish(int from, bool apply)
{
    char err[512];
    struct xfer_tally t;
    if (xfer_finish(prod, harness_conf.redis.key_prefix, ITEM, from, apply, &t, err, sizeof(err)) != 0)
        fail_msg("xfer_finish: %s", err);
    return t;
}

static void test_move_once_per_id(void **state)
{
    (void)state;
    struct xfer x = { .item = ITEM, .from = BUCKET_HOME, .to = 0, .want = 4, .keep = 0 };
    fresh(10);
    assert_int_equal(xfer_new_id(x.id), 0);
    assert_int_equal(strlen(x.id), XFER_ID_MAX - 1);
    assert_int_equal(move(&x), 4);
    assert_int_equal(stock(BUCKET_HOME), 6);
    assert_int_equal(stock(0), 4);
    /* given_back did not move: no unit left a buyer, and the producers'
     * tables of winners keep the item (the sold-out views see the stock) */
    assert_int_equal(harness_int(rc, "HEXISTS %s given_back", key(0, KEYS_ITEM_ORDERS)), 0);
    /* The same transfer again (a retry after a lost reply): the units it gave then, nothing more. */
    assert_int_equal(move(&x), 4);
    assert_int_equal(stock(BUCKET_HOME), 6);
    assert_int_equal(stock(0), 4);
    struct xfer_tally t = finish(BUCKET_HOME, true);
    assert_int_equal(t.given, 1);
    assert_int_equal(t.units, 4);
    assert_int_equal(t.in_flight, 0);
    assert_int_equal(t.finished, 0);
    /* Bucket to bucket, a new id. */
    struct xfer y = { .item = ITEM, .from = 0, .to = 1, .want = 3, .keep = 0 };
    assert_int_equal(xfer_new_id(y.id), 0);
    assert_true(strcmp(x.id, y.id) != 0);
    assert_int_equal(move(&y), 3);
    assert_int_equal(stock(BUCKET_HOME) + stock(0) + stock(1), 10);
    assert_int_equal(stock(1), 3);
}

static void test_keep_and_empty(void **state)
{
    (void)state;
    struct xfer x = { .item = ITEM, .from = BUCKET_HOME, .to = 1, .want = 10, .keep = 5 };
    fresh(7);
    assert_int_equal(xfer_new_id(x.id), 0);
    assert_int_equal(move(&x), 2); /* only what it holds above 5 */
    assert_int_equal(stock(BUCKET_HOME), 5);
    assert_int_equal(xfer_new_id(x.id), 0);
    assert_int_equal(move(&x), 0); /* nothing above 5 left: nothing given, nothing recorded */
    assert_int_equal(harness_int(rc, "HLEN %s", key(BUCKET_HOME, KEYS_ITEM_XOUT)), 1);
    assert_int_equal(stock(BUCKET_HOME) + stock(1), 7);
}

/* The giving half alone, as a producer killed between the halves leaves it. */
static void test_half_transfer_finished(void **state)
{
    (void)state;
    char id[XFER_ID_MAX];
    fresh(10);
    assert_int_equal(xfer_new_id(id), 0);
    redisReply *r = harness_cmd(rc, "FCALL seckill_xfer_out 2 %s %s %s 0 6 0", key(BUCKET_HOME, KEYS_ITEM_STOCK),
                                key(BUCKET_HOME, KEYS_ITEM_XOUT), id);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->integer, 6);
    freeReplyObject(r);
    assert_int_equal(stock(BUCKET_HOME) + stock(0), 4); /* 6 in flight */
    struct xfer_tally t = finish(BUCKET_HOME, false);
    assert_int_equal(t.in_flight, 6);
    assert_int_equal(t.finished, 0);
    assert_int_equal(stock(0), 0); /* looked, did not touch */
    /* The record a finisher holds (writes again, then WAITs for) before it
     * sends the receiving half: its units, and 0 for an id never given. */
    r = harness_cmd(rc, "FCALL seckill_xfer_hold 1 %s %s", key(BUCKET_HOME, KEYS_ITEM_XOUT), id);
    assert_int_equal(r->integer, 6);
    freeReplyObject(r);
    r = harness_cmd(rc, "FCALL seckill_xfer_hold 1 %s never-given", key(BUCKET_HOME, KEYS_ITEM_XOUT));
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);
    assert_int_equal(harness_int(rc, "HLEN %s", key(BUCKET_HOME, KEYS_ITEM_XOUT)), 1);
    t = finish(BUCKET_HOME, true);
    assert_int_equal(t.in_flight, 6);
    assert_int_equal(t.finished, 1);
    assert_int_equal(stock(0), 6);
    /* Finished twice, or the mover waking up and sending its half late: once. */
    t = finish(BUCKET_HOME, true);
    assert_int_equal(t.in_flight, 0);
    assert_int_equal(t.finished, 0);
    r = harness_cmd(rc, "FCALL seckill_xfer_in 3 %s %s %s %s 6", key(0, KEYS_ITEM_STOCK), key(0, KEYS_ITEM_XIN),
                    key(0, KEYS_ITEM_ORDERS), id);
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);
    assert_int_equal(stock(BUCKET_HOME) + stock(0), 10);
}

static void test_receiver_not_loaded(void **state)
{
    (void)state;
    char err[512];
    int64_t moved = -1;
    struct xfer x = { .item = ITEM, .from = BUCKET_HOME, .to = 1, .want = 3, .keep = 0 };
    struct xfer_tally t;
    fresh(5);
    freeReplyObject(harness_cmd(rc, "DEL %s", key(1, KEYS_ITEM_STOCK)));
    assert_int_equal(xfer_new_id(x.id), 0);
    assert_int_equal(xfer_move(prod, harness_conf.redis.key_prefix, &x, &moved, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "has no stock"));
    assert_int_equal(stock(1), -1); /* not made to look like a sale */
    assert_int_equal(xfer_finish(prod, harness_conf.redis.key_prefix, ITEM, BUCKET_HOME, false, &t, err,
                                 sizeof(err)), 0);
    assert_int_equal(t.in_flight, 3); /* counted, not lost */
    assert_int_equal(stock(BUCKET_HOME) + t.in_flight, 5);
    /* Loaded now: the finish lands them. */
    freeReplyObject(harness_cmd(rc, "SET %s 0", key(1, KEYS_ITEM_STOCK)));
    t = finish(BUCKET_HOME, true);
    assert_int_equal(t.finished, 1);
    assert_int_equal(stock(1), 3);
}

static void test_bad_arguments_refused(void **state)
{
    (void)state;
    char err[512];
    int64_t moved;
    struct xfer x = { .item = ITEM, .from = BUCKET_HOME, .to = 0, .want = 0, .keep = 0 };
    fresh(5);
    assert_int_equal(xfer_new_id(x.id), 0);
    assert_int_equal(xfer_move(prod, harness_conf.redis.key_prefix, &x, &moved, err, sizeof(err)), -1);
    x.want = 1;
    x.to = BUCKET_HOME;
    assert_int_equal(xfer_move(prod, harness_conf.redis.key_prefix, &x, &moved, err, sizeof(err)), -1);
    /* The functions check too: no negative units into a stock. */
    redisReply *r = harness_cmd(rc, "FCALL seckill_xfer_in 3 %s %s %s bad -5", key(0, KEYS_ITEM_STOCK),
                                key(0, KEYS_ITEM_XIN), key(0, KEYS_ITEM_ORDERS));
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    /* A record that is no SALT:UNITS is an error, and left alone. */
    freeReplyObject(harness_cmd(rc, "HSET %s junk nonsense", key(BUCKET_HOME, KEYS_ITEM_XOUT)));
    struct xfer_tally t;
    assert_int_equal(xfer_finish(prod, harness_conf.redis.key_prefix, ITEM, BUCKET_HOME, true, &t, err,
                                 sizeof(err)), -1);
    assert_non_null(strstr(err, "SALT:UNITS"));
    assert_int_equal(stock(BUCKET_HOME) + stock(0), 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_move_once_per_id),
        cmocka_unit_test(test_keep_and_empty),
        cmocka_unit_test(test_half_transfer_finished),
        cmocka_unit_test(test_receiver_not_loaded),
        cmocka_unit_test(test_bad_arguments_refused),
    };
    return cmocka_run_group_tests_name("xfer", tests, setup, teardown);
}
