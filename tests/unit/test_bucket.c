/* bucket.h and keys_item_at: a user's bucket is fixed and spreads users
 * evenly; the buckets' salts put K buckets on K primaries of a slot map
 * (a table here, as a Cluster's CLUSTER SLOTS gives it), the same choice
 * wherever it is made; bucket_spread sees two buckets that a reshard put on
 * one primary. No Redis. */
#include "harness.h"

#include <stdio.h>
#include <string.h>

#include "bucket.h"
#include "keys.h"
#include "slot.h"

/* A slot map of `nodes` primaries, each a contiguous range, as a fresh
 * Cluster spreads them; moved_from/moved_to: every slot of one primary
 * handed to another (a reshard). */
struct fake_map {
    int nodes, moved_from, moved_to;
};

static int fake_node_of(void *arg, const char *key)
{
    const struct fake_map *m = arg;
    unsigned slot = slot_of(key, strlen(key));
    int node = (int)(slot * (unsigned)m->nodes / 16384u);
    return node == m->moved_from ? m->moved_to : node;
}

static void test_user_bucket_fixed_and_even(void **state)
{
    (void)state;
    int count[3] = { 0 };
    for (int64_t u = 1; u <= 30000; u++) {
        int b = bucket_of(u, 3);
        assert_true(b >= 0 && b < 3);
        assert_int_equal(bucket_of(u, 3), b);
        count[b]++;
        assert_int_equal(bucket_of(u, 1), 0);
    }
    /* Consecutive ids, as a sale's users often are, spread within 3 %. */
    for (int b = 0; b < 3; b++)
        assert_true(count[b] > 9700 && count[b] < 10300);
    /* Not the id modulo K: users 1, 4, 7 ... would all share one bucket. */
    int same = 0;
    for (int64_t u = 1; u <= 300; u += 3)
        same += bucket_of(u, 3) == bucket_of(1, 3);
    assert_true(same < 60);
}

static void test_bucket_keys(void **state)
{
    (void)state;
    char k[KEYS_MAX], home[KEYS_MAX];
    assert_true(keys_item_at(k, sizeof(k), "p", 7, 3, KEYS_ITEM_STOCK) > 0);
    assert_string_equal(k, "p:{item:7:3}:stock");
    assert_true(keys_item_at(k, sizeof(k), "p", 7, 0, KEYS_ITEM_XIN) > 0);
    assert_string_equal(k, "p:{item:7:0}:xin");
    /* The home slot is the item's own: today's keys. */
    assert_true(keys_item_at(k, sizeof(k), "p", 7, BUCKET_HOME, KEYS_ITEM_XOUT) > 0);
    assert_true(keys_item(home, sizeof(home), "p", 7, KEYS_ITEM_XOUT) > 0);
    assert_string_equal(k, home);
    assert_string_equal(k, "p:{item:7}:xout");
    /* A bucket's keys share one slot, and it is the tag's. */
    char b[KEYS_MAX];
    assert_true(keys_item_at(b, sizeof(b), "p", 7, 3, KEYS_ITEM_BUYERS) > 0);
    assert_true(keys_item_at(k, sizeof(k), "p", 7, 3, KEYS_ITEM_STOCK) > 0);
    assert_int_equal(slot_of(k, strlen(k)), slot_of(b, strlen(b)));
    assert_int_equal(slot_of(k, strlen(k)), slot_of("item:7:3", 8));
    assert_int_equal(keys_item_at(k, 10, "p", 7, 3, KEYS_ITEM_STOCK), -1);
}

static void test_place_one_per_primary(void **state)
{
    (void)state;
    struct fake_map three = { 3, -1, -1 };
    for (int64_t item = 1; item <= 200; item++) {
        int salts[BUCKET_MAX], again[BUCKET_MAX];
        assert_int_equal(bucket_place("seckill", item, 3, 3, fake_node_of, &three, salts), 0);
        assert_int_equal(bucket_spread("seckill", item, 3, salts, fake_node_of, &three), 3);
        assert_true(salts[0] != salts[1] && salts[1] != salts[2] && salts[0] != salts[2]);
        /* The same map, the same choice. */
        assert_int_equal(bucket_place("seckill", item, 3, 3, fake_node_of, &three, again), 0);
        assert_memory_equal(salts, again, 3 * sizeof(int));
    }
}

static void test_place_more_buckets_than_primaries(void **state)
{
    (void)state;
    struct fake_map two = { 2, -1, -1 }, one = { 1, -1, -1 };
    int salts[BUCKET_MAX], per[2] = { 0 };
    assert_int_equal(bucket_place("seckill", 42, 5, 2, fake_node_of, &two, salts), 0);
    for (int b = 0; b < 5; b++) {
        char k[KEYS_MAX];
        keys_item_at(k, sizeof(k), "seckill", 42, salts[b], KEYS_ITEM_STOCK);
        per[fake_node_of(&two, k)]++;
    }
    /* As even as it can be: 3 and 2. */
    assert_true((per[0] == 3 && per[1] == 2) || (per[0] == 2 && per[1] == 3));
    /* One Redis: every bucket on it, salts 0 .. K-1. */
    assert_int_equal(bucket_place("seckill", 42, 4, 1, fake_node_of, &one, salts), 0);
    for (int b = 0; b < 4; b++)
        assert_int_equal(salts[b], b);
    assert_int_equal(bucket_place("seckill", 42, 0, 1, fake_node_of, &one, salts), -1);
    assert_int_equal(bucket_place("seckill", 42, BUCKET_MAX + 1, 1, fake_node_of, &one, salts), -1);
}

static void test_spread_after_reshard(void **state)
{
    (void)state;
    struct fake_map three = { 3, -1, -1 }, resharded = { 3, 1, 0 };
    int salts[BUCKET_MAX];
    assert_int_equal(bucket_place("seckill", 9, 3, 3, fake_node_of, &three, salts), 0);
    assert_int_equal(bucket_spread("seckill", 9, 3, salts, fake_node_of, &three), 3);
    /* Primary 1's slots moved to primary 0: two buckets share it now. */
    assert_int_equal(bucket_spread("seckill", 9, 3, salts, fake_node_of, &resharded), 2);
}

/* The salts as the window hash and the database keep them: what is written
 * reads back the same; one bucket is the empty text; anything else seckillctl
 * would never write is refused. */
static void test_salts_text(void **state)
{
    (void)state;
    int salts[BUCKET_MAX], k = 0, many[BUCKET_MAX + 1];
    char buf[BUCKET_MAX * 6];
    assert_int_equal(bucket_parse("5,17,4095", salts, &k), 0);
    assert_int_equal(k, 3);
    assert_int_equal(salts[0], 5);
    assert_int_equal(salts[2], 4095);
    assert_int_equal(bucket_format(buf, sizeof(buf), salts, k), 9);
    assert_string_equal(buf, "5,17,4095");
    assert_int_equal(bucket_parse("", salts, &k), 0);
    assert_int_equal(k, 1);
    assert_int_equal(bucket_format(buf, sizeof(buf), salts, 1), 0);
    assert_string_equal(buf, "");
    const char *bad[] = { "7", "1,1", "1,,2", "1,2,", ",1,2", "1, 2", "1,4096", "1,-2", "1,2x", "1,99999999",
                          "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (bucket_parse(bad[i], salts, &k) != -1)
            fail_msg("'%s' was taken for salts", bad[i]);
    for (int i = 0; i < BUCKET_MAX; i++)
        many[i] = 4000 + i;
    assert_int_equal(bucket_format(buf, sizeof(buf), many, BUCKET_MAX), BUCKET_MAX * 5 - 1);
    assert_int_equal(bucket_parse(buf, salts, &k), 0);
    assert_int_equal(k, BUCKET_MAX);
    assert_int_equal(bucket_format(buf, 8, many, 2), -1); /* "4000,4001" does not fit 8 */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_user_bucket_fixed_and_even),
        cmocka_unit_test(test_bucket_keys),
        cmocka_unit_test(test_place_one_per_primary),
        cmocka_unit_test(test_place_more_buckets_than_primaries),
        cmocka_unit_test(test_spread_after_reshard),
        cmocka_unit_test(test_salts_text),
    };
    return cmocka_run_group_tests_name("bucket", tests, NULL, NULL);
}
