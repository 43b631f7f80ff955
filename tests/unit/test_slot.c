/* slot: the hash slot of a key (checked against the Cluster specification's
 * and Redis's documented values), the map read from CLUSTER SLOTS, and the
 * MOVED / ASK replies. Replies are parsed from RESP text by hiredis's own
 * reader, as they come off a connection. The slots of live keys against a
 * real Cluster's CLUSTER KEYSLOT are in tests/it/test_rcluster.c. */
#include "harness.h"

#include <string.h>

#include "slot.h"

static unsigned slot_str(const char *key) { return slot_of(key, strlen(key)); }

static void test_slot_of(void **state)
{
    (void)state;
    /* The values Redis's documentation gives for CLUSTER KEYSLOT. */
    assert_int_equal(slot_str("somekey"), 11058);
    assert_int_equal(slot_str("foo{hash_tag}"), 2515);
    /* The specification's CRC16 check value 0x31C3, modulo 16384. */
    assert_int_equal(slot_str("123456789"), 0x31C3 & 16383);
    /* Hash tags, the specification's examples: the same tag, the same slot */
    assert_int_equal(slot_str("{user1000}.following"), slot_str("{user1000}.followers"));
    assert_int_equal(slot_str("{user1000}.following"), slot_str("user1000"));
    /* "{}" is no tag: the whole key; only the first "{...}" counts */
    assert_int_not_equal(slot_str("foo{}{bar}"), slot_str("bar"));
    assert_int_equal(slot_str("foo{{bar}}zap"), slot_str("{bar"));
    assert_int_equal(slot_str("foo{bar}{zap}"), slot_str("bar"));
    assert_int_equal(slot_str("foo{bar"), slot_str("foo{bar")); /* no '}': whole key, no overread */
    assert_int_not_equal(slot_str("foo{bar"), slot_str("bar"));
    /* an item's keys share its tag's slot */
    assert_int_equal(slot_str("seckill:{item:42}:stock"), slot_str("seckill:{item:42}:buyers"));
    assert_int_equal(slot_str("seckill:{item:42}:stock"), slot_str("item:42"));
    /* binary-safe: a NUL inside the key counts */
    assert_int_not_equal(slot_of("a\0b", 3), slot_of("a", 1));
}

#define NODE_ID "$40\r\n0123456789012345678901234567890123456789\r\n"

static void test_map_read(void **state)
{
    (void)state;
    static struct slot_map m;
    char err[256];
    redisReply *r = harness_resp("*3\r\n"
                         "*4\r\n:0\r\n:5460\r\n*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n" NODE_ID
                         "*3\r\n$9\r\n127.0.0.1\r\n:7004\r\n" NODE_ID
                         "*3\r\n:5461\r\n:10922\r\n*3\r\n$9\r\n127.0.0.1\r\n:7001\r\n" NODE_ID
                         "*3\r\n:10924\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:7002\r\n" NODE_ID);
    assert_int_equal(slot_map_read(r, &m, err, sizeof(err)), 0);
    freeReplyObject(r);
    assert_int_equal(m.nnodes, 3); /* the replica 7004 is not a node to send to */
    assert_int_equal(m.node[m.owner[0]].port, 7000);
    assert_int_equal(m.node[m.owner[5460]].port, 7000);
    assert_int_equal(m.node[m.owner[5461]].port, 7001);
    assert_int_equal(m.owner[10923], -1); /* no range names it */
    assert_int_equal(m.node[m.owner[16383]].port, 7002);
    assert_string_equal(m.node[m.owner[16383]].host, "127.0.0.1");
    assert_int_equal(slot_map_holes(&m), 1);

    /* MOVED: one slot changes hands, to a node the map did not know */
    assert_int_equal(slot_map_set(&m, 10923, "127.0.0.1", 7003), 0);
    assert_int_equal(m.node[m.owner[10923]].port, 7003);
    assert_int_equal(m.nnodes, 4);
    assert_int_equal(slot_map_holes(&m), 0);
    assert_int_equal(slot_map_set(&m, 16384, "127.0.0.1", 7003), -1);
}

static void test_map_read_refuses(void **state)
{
    (void)state;
    static struct slot_map m;
    char err[256];
    const char *bad[] = {
        "-ERR This instance has cluster support disabled\r\n",
        "$2\r\nok\r\n",
        "*1\r\n*2\r\n:0\r\n:5\r\n",                                       /* no primary */
        "*1\r\n*3\r\n:5\r\n:4\r\n*2\r\n$1\r\nh\r\n:1\r\n",                /* end before start */
        "*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\nh\r\n:1\r\n",            /* past the last slot */
        "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$1\r\nh\r\n:70000\r\n",            /* no such port */
        "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n:1\r\n:7000\r\n",                  /* host not a string */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        redisReply *r = harness_resp(bad[i]);
        err[0] = '\0';
        assert_int_equal(slot_map_read(r, &m, err, sizeof(err)), -1);
        assert_true(strncmp(err, "CLUSTER SLOTS: ", 15) == 0);
        assert_int_equal(slot_map_holes(&m), SLOT_COUNT); /* nothing half-read is kept */
        freeReplyObject(r);
    }
}

static void test_redirect(void **state)
{
    (void)state;
    char host[64];
    unsigned slot = 0;
    int port = 0;
    redisReply *r = harness_resp("-MOVED 3999 127.0.0.1:6381\r\n");
    assert_int_equal(slot_redirect_of(r, &slot, host, sizeof(host), &port), SLOT_MOVED);
    assert_int_equal(slot, 3999);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 6381);
    freeReplyObject(r);
    r = harness_resp("-ASK 16383 ::1:7000\r\n"); /* IPv6: the port is after the last colon */
    assert_int_equal(slot_redirect_of(r, &slot, host, sizeof(host), &port), SLOT_ASK);
    assert_int_equal(slot, 16383);
    assert_string_equal(host, "::1");
    assert_int_equal(port, 7000);
    freeReplyObject(r);

    const char *not_one[] = {
        "-ERR unknown command\r\n", "+MOVED 1 h:1\r\n", "-MOVED\r\n", "-MOVED 1\r\n",
        "-MOVED 16384 h:1\r\n",     "-MOVED -1 h:1\r\n", "-MOVED 1 h:0\r\n", "-MOVED 1 :6379\r\n",
        "-MOVED 1 h:65536\r\n",     "-MOVED x h:1\r\n",  "-ASK 1 h:1x\r\n",
    };
    for (size_t i = 0; i < sizeof(not_one) / sizeof(not_one[0]); i++) {
        r = harness_resp(not_one[i]);
        assert_int_equal(slot_redirect_of(r, &slot, host, sizeof(host), &port), SLOT_NO_REDIRECT);
        freeReplyObject(r);
    }
    /* a host longer than the caller's buffer is not followed */
    r = harness_resp("-MOVED 1 a-very-long-host-name.example:1\r\n");
    assert_int_equal(slot_redirect_of(r, &slot, host, 8, &port), SLOT_NO_REDIRECT);
    freeReplyObject(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slot_of),
        cmocka_unit_test(test_map_read),
        cmocka_unit_test(test_map_read_refuses),
        cmocka_unit_test(test_redirect),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
