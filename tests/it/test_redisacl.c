/* Least privilege in Redis (issues #19 and #34): each program's ACL user is
 * refused what it must not do (NOPERM): no code of its own (EVAL, SCRIPT
 * LOAD, EVALSHA, FUNCTION LOAD/DELETE/FLUSH), and each plain command only on
 * its own kind of key; the default user lets nobody in (NOAUTH); a producer
 * whose password is wrong, then put right in its file and reloaded (SIGHUP),
 * or rotated, recovers without a restart, logging one line per state change
 * and never the password; a daemon refuses to start against a Redis without
 * its functions, or with older ones, and a producer whose Redis loses them
 * while it runs answers 503 until seckillctl loads them again; a consumer
 * whose user may no longer call functions logs it once while it lasts, not
 * once per attempt (issue #33). The rules are written by
 * scripts/stack.d/redis.sh (redis_acl_rules); the table is in docs/security.md. (That
 * each program works end to end with its own user is what every other
 * suite shows.) */
#include "funclibs.h"
#include "harness.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bucket.h"
#include "keys.h"
#include "rconn.h"
#include "rfunc.h"
#include "sale.h"
#include "secret.h"

static redisContext *as(enum cfg_role r)
{
    redisContext *rc = NULL;
    char err[256];
    if (rconn_open_as(&harness_conf, r, &rc, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    return rc;
}

/* The reply to argv is an error starting with want ("NOPERM", "NOAUTH"). */
static void refused(redisContext *rc, const char *want, int argc, const char **argv)
{
    redisReply *r = redisCommandArgv(rc, argc, argv, NULL);
    if (r == NULL)
        fail_msg("%s: %s", argv[0], rc->errstr);
    if (r->type != REDIS_REPLY_ERROR || strncmp(r->str, want, strlen(want)) != 0)
        fail_msg("%s %s: want %s, got %s", argv[0], argc > 1 ? argv[1] : "", want,
                 r->type == REDIS_REPLY_ERROR ? r->str : "a reply");
    freeReplyObject(r);
}

static void allowed(redisContext *rc, int argc, const char **argv)
{
    redisReply *r = redisCommandArgv(rc, argc, argv, NULL);
    if (r == NULL)
        fail_msg("%s: %s", argv[0], rc->errstr);
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("%s %s: refused: %s", argv[0], argc > 1 ? argv[1] : "", r->str);
    freeReplyObject(r);
}

#define REFUSED(rc, ...)                                                                                     \
    do {                                                                                                     \
        const char *a_[] = { __VA_ARGS__ };                                                                  \
        refused((rc), "NOPERM", (int)ARRAY_SIZE(a_), a_);                                                    \
    } while (0)
#define ALLOWED(rc, ...)                                                                                     \
    do {                                                                                                     \
        const char *a_[] = { __VA_ARGS__ };                                                                  \
        allowed((rc), (int)ARRAY_SIZE(a_), a_);                                                              \
    } while (0)

/* What no program may do: the server's, not the sale's. */
static void no_server_commands(redisContext *rc)
{
    REFUSED(rc, "FLUSHALL");
    REFUSED(rc, "FLUSHDB");
    REFUSED(rc, "KEYS", "*");
    REFUSED(rc, "CONFIG", "GET", "*");
    REFUSED(rc, "CONFIG", "SET", "appendonly", "no");
    REFUSED(rc, "MONITOR");
    REFUSED(rc, "DEBUG", "SLEEP", "0");
    REFUSED(rc, "SHUTDOWN", "NOSAVE");
    REFUSED(rc, "ACL", "LIST");
}

/* Issue #34: no code of its own, in any form, and nothing that takes the
 * operator's functions away. (while true do end in an EVAL would stop Redis
 * for everyone; SCRIPT LOAD + EVALSHA was EVAL by another name.) */
static void no_code(redisContext *rc)
{
    static const char lib[] = "#!lua name=sktest_evil\n"
                              "redis.register_function('sktest_evil', function() while true do end end)";
    REFUSED(rc, "EVAL", "return 1", "0");
    REFUSED(rc, "EVAL_RO", "return 1", "0");
    REFUSED(rc, "SCRIPT", "LOAD", "while true do end");
    REFUSED(rc, "EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "0");
    REFUSED(rc, "EVALSHA_RO", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "0");
    REFUSED(rc, "SCRIPT", "FLUSH");
    REFUSED(rc, "FUNCTION", "LOAD", lib);
    REFUSED(rc, "FUNCTION", "LOAD", "REPLACE", lib);
    REFUSED(rc, "FUNCTION", "DELETE", "seckill_producer");
    REFUSED(rc, "FUNCTION", "FLUSH");
    REFUSED(rc, "FUNCTION", "RESTORE", "x");
    REFUSED(rc, "FUNCTION", "DUMP");
    REFUSED(rc, "FUNCTION", "KILL");
    /* what it does: ask which libraries are there, call a function */
    ALLOWED(rc, "FUNCTION", "LIST", "LIBRARYNAME", "seckill_*");
    ALLOWED(rc, "FCALL", "seckill_producer_version", "0");
}

/* FCALL name keys...: refused inside the function (Redis checks each
 * command a function runs against the caller's rules): its error says the
 * command, or the keys it touched, were not the caller's to run. */
static void refused_inside(redisContext *rc, int argc, const char **argv)
{
    redisReply *r = redisCommandArgv(rc, argc, argv, NULL);
    if (r == NULL)
        fail_msg("%s: %s", argv[1], rc->errstr);
    if (r->type != REDIS_REPLY_ERROR ||
        (!strstr(r->str, "can't run this command") && !strstr(r->str, "can't access at least one of the keys")))
        fail_msg("FCALL %s: want a refusal inside it, got %s", argv[1],
                 r->type == REDIS_REPLY_ERROR ? r->str : "a reply");
    freeReplyObject(r);
}
#define REFUSED_INSIDE(rc, ...)                                                                              \
    do {                                                                                                     \
        const char *a_[] = { __VA_ARGS__ };                                                                  \
        refused_inside((rc), (int)ARRAY_SIZE(a_), a_);                                                       \
    } while (0)

static void test_producer_refused(void **state)
{
    (void)state;
    char lk[KEYS_MAX], k[KEYS_ITEM_PARTS][KEYS_MAX], idx[KEYS_MAX], items[KEYS_MAX];
    const char *p = harness_conf.redis.key_prefix;
    assert_true(keys_lock(lk, sizeof(lk), p, "acl-test") > 0);
    assert_int_equal(keys_item_all(k, p, 1), 0);
    assert_true(keys_order_bucket(idx, sizeof(idx), p, 1) > 0);
    assert_true(keys_items(items, sizeof(items), p) > 0);
    const char *stock = k[KEYS_ITEM_STOCK], *buyers = k[KEYS_ITEM_BUYERS], *window = k[KEYS_ITEM_WINDOW];
    redisContext *rc = as(CFG_ROLE_PRODUCER);
    no_server_commands(rc);
    no_code(rc);
    REFUSED(rc, "HSET", lk, "acl-test", "x");
    REFUSED(rc, "HGET", lk, "acl-test");
    /* Each command on its own keys only (issue #34). The stock: read,
     * DECR and INCR (reserve, give back), DECRBY and INCRBY (units moved
     * between an item's buckets, xfer.h: no more than INCR could do one at
     * a time), never set or expired. */
    REFUSED(rc, "SET", stock, "1000000");
    REFUSED(rc, "PEXPIRE", stock, "1");
    REFUSED(rc, "DEL", stock);
    /* the sale window is seckillctl's: no opening a sale early */
    REFUSED(rc, "HSET", window, "starts_ms", "0");
    REFUSED(rc, "HDEL", window, "starts_ms");
    REFUSED(rc, "DEL", window);
    /* the buyers: no emptying the set (SREM stays: seckill_restore gives
     * a unit back with it, and Redis checks a function's commands against
     * the caller's rules; docs/security.md says what that leaves) */
    REFUSED(rc, "DEL", buyers);
    REFUSED(rc, "SPOP", buyers);
    REFUSED(rc, "PEXPIRE", buyers, "1");
    REFUSED(rc, "SREM", k[KEYS_ITEM_ORDERS], "1"); /* a command on another kind of key */
    REFUSED(rc, "HSET", stock, "f", "v");
    REFUSED(rc, "PEXPIRE", k[KEYS_ITEM_PENDING], "1");
    REFUSED(rc, "SADD", items, "1"); /* the registry is seckillctl's */
    /* a function is checked against the keys it declares */
    REFUSED(rc, "FCALL", "seckill_lock_acquire", "1", lk, "owner", "10000", "86400000", "acl-test", "req");
    /* seckillctl's functions declare the item's keys, but write what the
     * producer may not: refused inside */
    REFUSED_INSIDE(rc, "FCALL", "seckill_recon_window", "1", window, "0", "");
    REFUSED_INSIDE(rc, "FCALL", "seckill_recon_window2", "1", window, "", "", "", "", "");
    REFUSED_INSIDE(rc, "FCALL", "seckill_window_put", "1", window, "starts_ms", "1");
    redisContext *st = harness_redis(&harness_conf);
    freeReplyObject(harness_cmd(st, "SET %s 7", stock));
    REFUSED_INSIDE(rc, "FCALL", "seckill_recon_lower", "1", stock, "7", "1000");
    assert_int_equal(harness_int(st, "GET %s", stock), 7);
    freeReplyObject(harness_cmd(st, "DEL %s", stock));
    redisFree(st);
    /* what it does */
    ALLOWED(rc, "GET", stock);
    ALLOWED(rc, "HMGET", window, "starts_ms", "ends_ms");
    ALLOWED(rc, "SISMEMBER", buyers, "1");
    ALLOWED(rc, "HGET", idx, "1");
    ALLOWED(rc, "SMEMBERS", items);
    ALLOWED(rc, "PING");
    {
        /* the transfers' records (xfer.h): counted by the sweeper, which
         * finishes one left half done; never deleted */
        char xo[KEYS_MAX], xi[KEYS_MAX];
        assert_true(keys_item_at(xo, sizeof(xo), p, 1, 0, KEYS_ITEM_XOUT) > 0);
        assert_true(keys_item_at(xi, sizeof(xi), p, 1, BUCKET_HOME, KEYS_ITEM_XIN) > 0);
        ALLOWED(rc, "HLEN", xo);
        ALLOWED(rc, "HLEN", xi);
        REFUSED(rc, "DEL", xo);
        REFUSED(rc, "HDEL", xi, "id");
    }
    redisFree(rc);
}

static void test_consumer_refused(void **state)
{
    (void)state;
    char stock[KEYS_MAX], buyers[KEYS_MAX], orders[KEYS_MAX], lk[KEYS_MAX];
    const char *p = harness_conf.redis.key_prefix;
    assert_true(keys_item(stock, sizeof(stock), p, 2, KEYS_ITEM_STOCK) > 0);
    assert_true(keys_item(buyers, sizeof(buyers), p, 2, KEYS_ITEM_BUYERS) > 0);
    assert_true(keys_item(orders, sizeof(orders), p, 2, KEYS_ITEM_ORDERS) > 0);
    assert_true(keys_lock(lk, sizeof(lk), p, "acl-test") > 0);
    char window[KEYS_MAX];
    assert_true(keys_item(window, sizeof(window), p, 2, KEYS_ITEM_WINDOW) > 0);
    redisContext *rc = as(CFG_ROLE_CONSUMER);
    no_server_commands(rc);
    no_code(rc);
    /* Issue #44: INCR is its since seckill_return gives units of expired
     * orders back; it still never takes one (DECR), sets or deletes a stock */
    REFUSED(rc, "DECR", stock);
    REFUSED(rc, "DECRBY", stock, "5");
    REFUSED(rc, "INCRBY", stock, "5");
    /* Issue #34: PEXPIRE is for its locks only: no taking an item off sale */
    REFUSED(rc, "PEXPIRE", stock, "1");
    REFUSED(rc, "SET", stock, "0");
    REFUSED(rc, "DEL", stock);
    REFUSED(rc, "HSET", window, "ends_ms", "0");
    /* SREM is its since seckill_return frees an expired order's buyer; the
     * returned set only grows (SADD): no un-returning an order */
    char returned[KEYS_MAX];
    assert_true(keys_item(returned, sizeof(returned), p, 2, KEYS_ITEM_RETURNED) > 0);
    REFUSED(rc, "SREM", returned, "1");
    REFUSED(rc, "DEL", returned);
    REFUSED(rc, "SMEMBERS", returned);
    REFUSED(rc, "SCARD", buyers);
    REFUSED(rc, "PEXPIRE", orders, "1");
    REFUSED(rc, "HSET", stock, "f", "v");
    /* the producer's functions write what the consumer may not */
    char pending[KEYS_MAX], unpub[KEYS_MAX];
    assert_true(keys_item(pending, sizeof(pending), p, 2, KEYS_ITEM_PENDING) > 0);
    assert_true(keys_item(unpub, sizeof(unpub), p, 2, KEYS_ITEM_UNPUB) > 0);
    REFUSED_INSIDE(rc, "FCALL", "seckill_restore", "5", stock, orders, pending, unpub, orders, "1", "1", "1");
    REFUSED(rc, "SADD", buyers, "1"); /* the buyers are the producer's */
    REFUSED(rc, "SMEMBERS", buyers);
    ALLOWED(rc, "EXISTS", stock);
    ALLOWED(rc, "HSET", orders, "o:1", "x");
    ALLOWED(rc, "HMGET", lk, "acl-test", "{fence}");
    /* Issue #57: it reads which buckets an item has (where an order's
     * reservation is), and nothing else of the window */
    ALLOWED(rc, "HGET", window, "buckets");
    REFUSED(rc, "HGETALL", window);
    REFUSED(rc, "HDEL", window, "buckets");
    REFUSED(rc, "GET", lk); /* the locks are a hash: no string commands */
    redisFree(rc);
}

static void test_admin_refused(void **state)
{
    (void)state;
    redisContext *rc = as(CFG_ROLE_ADMIN);
    no_server_commands(rc);
    REFUSED(rc, "GET", "someone-else:x"); /* outside its prefixes */
    redisFree(rc);
}

/* No AUTH: the default user is off. */
static void test_default_user_noauth(void **state)
{
    (void)state;
    redisContext *rc = NULL;
    char err[256];
    assert_int_equal(rconn_open_user(&harness_conf, "", NULL, &rc, err, sizeof(err)), 0);
    const char *ping[] = { "PING" };
    refused(rc, "NOAUTH", 1, ping);
    redisFree(rc);
}

/* --- a producer with a password it has to learn ----------------------- */

/* An ACL user of its own with the rules of role's user, so that changing
 * its password or its rules touches no other test's daemon. */
static char user[64];

static void user_create_as(enum cfg_role role, const char *password)
{
    redisContext *rc = harness_redis(&harness_conf);
    redisReply *l = harness_cmd(rc, "ACL LIST");
    assert_int_equal(l->type, REDIS_REPLY_ARRAY);
    char want[80];
    snprintf(want, sizeof(want), "user %s ", harness_conf.redis.user[role]);
    const char *line = NULL;
    for (size_t i = 0; i < l->elements; i++)
        if (strncmp(l->element[i]->str, want, strlen(want)) == 0)
            line = l->element[i]->str;
    if (!line)
        fail_msg("no ACL user %s", harness_conf.redis.user[role]);
    /* "user NAME on #hash rules...": the rules, without the password. A
     * selector "(~k +cmd)" comes apart at its spaces: ACL SETUSER puts
     * such arguments back together (Redis 7.0). */
    const char *argv[512];
    char *copy = strdup(line), *save = NULL, pw[128];
    int n = 0, word = 0;
    argv[n++] = "ACL";
    argv[n++] = "SETUSER";
    argv[n++] = user;
    argv[n++] = "reset";
    for (char *t = strtok_r(copy, " ", &save); t; t = strtok_r(NULL, " ", &save), word++)
        if (word >= 2 && t[0] != '#' && t[0] != '>' && n < 510)
            argv[n++] = t;
    snprintf(pw, sizeof(pw), ">%s", password);
    argv[n++] = pw;
    redisReply *r = redisCommandArgv(rc, n, argv, NULL);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("ACL SETUSER %s: %s", user, r->str);
    freeReplyObject(r);
    free(copy);
    freeReplyObject(l);
    redisFree(rc);
}

static void user_create(const char *password)
{
    user_create_as(CFG_ROLE_PRODUCER, password);
}

static void user_password(const char *password)
{
    redisContext *rc = harness_redis(&harness_conf);
    char pw[128];
    snprintf(pw, sizeof(pw), ">%s", password);
    const char *argv[] = { "ACL", "SETUSER", user, "resetpass", pw };
    allowed(rc, 5, argv);
    redisFree(rc);
}

static void user_kill_clients(void)
{
    redisContext *rc = harness_redis(&harness_conf);
    freeReplyObject(harness_cmd(rc, "CLIENT KILL USER %s", user));
    redisFree(rc);
}

/* Failed AUTHs as user that Redis logged (ACL LOG counts repeats). */
static long long auth_failures(void)
{
    redisContext *rc = harness_redis(&harness_conf);
    redisReply *r = harness_cmd(rc, "ACL LOG 128");
    long long n = 0;
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        const redisReply *e = r->element[i];
        long long count = 0;
        bool auth = false, ours = false;
        for (size_t j = 0; e->type == REDIS_REPLY_ARRAY && j + 1 < e->elements; j += 2) {
            const char *k = e->element[j]->str;
            const redisReply *v = e->element[j + 1];
            if (strcmp(k, "count") == 0)
                count = v->integer;
            else if (strcmp(k, "reason") == 0)
                auth = v->type == REDIS_REPLY_STRING && strcmp(v->str, "auth") == 0;
            else if (strcmp(k, "username") == 0)
                ours = v->type == REDIS_REPLY_STRING && strcmp(v->str, user) == 0;
        }
        if (auth && ours)
            n += count;
    }
    freeReplyObject(r);
    redisFree(rc);
    return n;
}

static char last_resp[512];

static int order(int port, int64_t u, int64_t item) { return harness_order(port, u, item, last_resp, sizeof(last_resp)); }

static void test_producer_wrong_password_then_reload_then_rotation(void **state)
{
    (void)state;
    char pwfile[128], cfgpath[256], log[256], bin[512], pw1[40], pw2[40], pw3[40], wrong[40], rnd[17];
    struct cfg c;
    bool ok;
    assert_int_equal(util_random_hex(rnd, 8), 0);
    snprintf(user, sizeof(user), "sktest-producer-%d", (int)getpid());
    snprintf(pw1, sizeof(pw1), "first-%s", rnd);
    snprintf(pw2, sizeof(pw2), "second-%s", rnd);
    snprintf(pw3, sizeof(pw3), "third-%s", rnd);
    snprintf(wrong, sizeof(wrong), "wrong-%s", rnd);
    user_create(pw1);
    snprintf(pwfile, sizeof(pwfile), "/tmp/sktest-redis-pw-%d", (int)getpid());
    harness_write_secret(pwfile, wrong);

    harness_cfg(&c);
    harness_set_str(&c.redis.key_prefix, harness_conf.redis.key_prefix);
    harness_set_str(&c.redis.user[CFG_ROLE_PRODUCER], user);
    harness_set_str(&c.redis.password_file[CFG_ROLE_PRODUCER], pwfile);
    harness_producer_ports(&c);
    int port = c.producer.port, mport = c.producer.metrics_port;
    harness_cfg_file(&c, cfgpath, sizeof(cfgpath));
    snprintf(log, sizeof(log), "/tmp/seckill-test-redisacl-%d.log", port);
    unlink(log);
    harness_bin("seckill-producer", bin, sizeof(bin));

    /* an item to buy, loaded by seckillctl as admin */
    int64_t item = harness_item_create(cfgpath, 950000000 + (int64_t)util_rand_below(9999999), 100),
            u = 1000000 + (int64_t)util_rand_below(1000000);

    /* 1. Started with a wrong password: it waits, retrying, and says so once. */
    char *argv[] = { bin, "-c", cfgpath, NULL };
    pid_t pid = harness_spawn(argv, log);
    WAIT_UNTIL(auth_failures() >= 3, 30000, ok);
    if (!ok)
        fail_msg("the producer did not retry its AUTH; see %s", log);
    assert_int_equal(kill(pid, 0), 0);
    assert_int_equal(harness_file_lines(log, "WRONGPASS"), 1);
    assert_int_equal(harness_file_lines(log, wrong), 0);
    assert_true(harness_http(port, "GET", "/healthz", NULL, NULL, NULL, 0) < 0); /* not taking orders yet */

    /* 2. The right password into the file, SIGHUP: it starts taking orders. */
    harness_write_secret(pwfile, pw1);
    assert_int_equal(kill(pid, SIGHUP), 0);
    WAIT_UNTIL(harness_http(port, "GET", "/healthz", NULL, NULL, NULL, 0) == 200, 30000, ok);
    if (!ok)
        fail_msg("the producer did not come up after SIGHUP; see %s", log);
    /* The metrics listener opens a moment after the buyers' one. */
    WAIT_UNTIL(sale_metric(mport, "seckill_producer_redis_up") == 1, 10000, ok);
    assert_true(ok);
    if (order(port, u++, item) != 202)
        fail_msg("the first order: %s; see %s", last_resp, log);

    /* 3. The password changes under it (its connections are killed): orders
     * are refused, the gauge says down, one line says so, however many
     * attempts; the file put right and SIGHUP: orders again. */
    user_password(pw2);
    user_kill_clients();
    WAIT_UNTIL(order(port, u++, item) == 503 && sale_metric(mport, "seckill_producer_redis_up") == 0, 15000,
               ok);
    if (!ok)
        fail_msg("the producer did not notice its password was refused; see %s", log);
    long long before = auth_failures();
    WAIT_UNTIL((order(port, u++, item), auth_failures() >= before + 3), 15000, ok);
    assert_true(ok);
    assert_int_equal(kill(pid, 0), 0);
    assert_int_equal(harness_file_lines(log, "orders are refused (503) until it is back"), 1);
    harness_write_secret(pwfile, pw2);
    assert_int_equal(kill(pid, SIGHUP), 0);
    WAIT_UNTIL(order(port, u++, item) == 202, 15000, ok);
    if (!ok)
        fail_msg("the producer did not take orders after the file was put right; see %s", log);
    assert_int_equal(sale_metric(mport, "seckill_producer_redis_up"), 1);
    assert_int_equal(harness_file_lines(log, "connected again; orders are taken again"), 1);

    /* 4. Rotation: new password on the server and in the file, SIGHUP, the
     * old connections killed: the producer reconnects with the new one. */
    user_password(pw3);
    harness_write_secret(pwfile, pw3);
    assert_int_equal(kill(pid, SIGHUP), 0);
    WAIT_UNTIL(harness_file_lines(log, "configuration reloaded") >= 3, 15000, ok);
    assert_true(ok);
    user_kill_clients();
    WAIT_UNTIL(order(port, u++, item) == 202, 15000, ok);
    if (!ok)
        fail_msg("the producer did not take orders after the rotation; see %s", log);
    assert_int_equal(sale_metric(mport, "seckill_producer_redis_up"), 1);

    /* never a password in the log */
    assert_int_equal(harness_file_lines(log, pw1), 0);
    assert_int_equal(harness_file_lines(log, pw2), 0);
    assert_int_equal(harness_file_lines(log, pw3), 0);
    assert_int_equal(harness_file_lines(log, wrong), 0);

    assert_int_equal(kill(pid, SIGTERM), 0);
    assert_int_equal(harness_wait_exit(pid, 30000), 0);
    redisContext *rc = harness_redis(&harness_conf);
    freeReplyObject(harness_cmd(rc, "ACL DELUSER %s", user));
    redisFree(rc);
    harness_pg_try(&harness_conf, "DELETE FROM items WHERE item_id = $1", item, 0);
    unlink(pwfile);
    unlink(cfgpath);
    unlink(log);
    cfg_free(&c);
}

/* --- a Redis without the functions (issue #34) ------------------------ */

/* A redis-server of this test's own on a free port, with the stack's ACL
 * file (the same users and passwords) and no persistence: flushing its
 * functions touches no other test. Waits until it answers. */
static pid_t scratch_redis(struct cfg *c, const char *dir, const char *log)
{
    char port[16], acl[600];
    bool ok;
    c->redis.port = harness_free_port();
    snprintf(port, sizeof(port), "%d", c->redis.port);
    snprintf(acl, sizeof(acl), "%s/redis-acl.conf", harness_stack_dir());
    assert_true(mkdir(dir, 0700) == 0 || errno == EEXIST);
    char *argv[] = { "/usr/bin/redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
                     "--appendonly", "no", "--dir", (char *)dir, "--aclfile", acl, NULL };
    pid_t pid = harness_spawn(argv, log);
    redisContext *rc = NULL;
    char err[256];
    WAIT_UNTIL(harness_redis_open(c, &rc, err, sizeof(err)) == 0, 10000, ok);
    if (!ok)
        fail_msg("the scratch redis-server on %s did not answer: %s; see %s", port, err, log);
    redisFree(rc);
    return pid;
}

/* Run seckillctl -c cfg functions OP; its exit status, its output in out. */
static int ctl_functions(const char *cfgpath, const char *op, char **out)
{
    const char *args[] = { "-c", cfgpath, "functions", op, NULL };
    return harness_run(out, "seckillctl", args, 30000);
}

/* Start bin (-c cfgpath) and wait for its exit: it must refuse to start. */
static void refuses_to_start(const char *bin, const char *cfgpath, const char *log, const char *want)
{
    char path[512];
    harness_bin(bin, path, sizeof(path));
    char *argv[] = { path, "-c", (char *)cfgpath, NULL };
    unlink(log);
    int st = harness_wait_exit(harness_spawn(argv, log), 30000);
    if (st != 1 || harness_file_lines(log, want) != 1)
        fail_msg("%s: want exit 1 and one line \"%s\", got exit %d; see %s", bin, want, st, log);
}

/* Each daemon refuses to start without its libraries, or with an older
 * one, saying which, the versions and the command that loads them; after
 * seckillctl functions load the producer takes orders; a FUNCTION FLUSH
 * under it turns them into 503s, said once, with the gauge; loading them
 * again brings the orders back, without a restart. */
static void test_functions_missing_then_loaded(void **state)
{
    (void)state;
    char dir[64], rlog[128], plog[128], clog[128], cfgpath[256], bin[512], *out = NULL, want[256];
    struct cfg c;
    bool ok;
    snprintf(dir, sizeof(dir), "/tmp/sktest-redisfn-%d", (int)getpid());
    snprintf(rlog, sizeof(rlog), "%s/redis.log", dir);
    snprintf(plog, sizeof(plog), "%s/producer.log", dir);
    snprintf(clog, sizeof(clog), "%s/consumer.log", dir);
    harness_cfg(&c);
    harness_set_str(&c.redis.key_prefix, harness_conf.redis.key_prefix);
    pid_t rpid = scratch_redis(&c, dir, rlog);
    harness_producer_ports(&c);
    int port = c.producer.port, mport = c.producer.metrics_port;
    harness_cfg_file(&c, cfgpath, sizeof(cfgpath));
    int want_v = rfunc_lib_version(&funclib_producer);
    assert_true(want_v >= 1);

    /* 1. Nothing loaded: neither daemon starts. */
    snprintf(want, sizeof(want),
             "refusing to start: the function library seckill_producer is not loaded (this program needs "
             "version %d); load them: seckillctl functions load",
             want_v);
    refuses_to_start("seckill-producer", cfgpath, plog, want);
    refuses_to_start("seckill-consumer", cfgpath, clog,
                     "refusing to start: the function library seckill_consumer is not loaded");
    assert_int_equal(ctl_functions(cfgpath, "check", &out), 1);
    assert_non_null(strstr(out, "seckill_producer is not loaded"));
    free(out);

    /* 2. An older library under the same name (its VERSION one less). */
    char mark[32], older[32];
    snprintf(mark, sizeof(mark), "\nlocal VERSION = %d\n", want_v);
    snprintf(older, sizeof(older), "\nlocal VERSION = %d\n", want_v - 1);
    const char *src = funclib_producer.source, *at = strstr(src, mark);
    assert_non_null(at);
    size_t len = strlen(src) + 8;
    char *old = malloc(len);
    assert_non_null(old);
    snprintf(old, len, "%.*s%s%s", (int)(at - src), src, older, at + strlen(mark));
    redisContext *rc = harness_redis(&c);
    redisReply *r = harness_cmd(rc, "FUNCTION LOAD %s", old);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    freeReplyObject(r);
    free(old);
    snprintf(want, sizeof(want),
             "refusing to start: the function library seckill_producer is version %d, older than the %d this "
             "program needs; load them: seckillctl functions load",
             want_v - 1, want_v);
    refuses_to_start("seckill-producer", cfgpath, plog, want);

    /* 3. seckillctl loads them (as admin), over the older one. */
    assert_int_equal(ctl_functions(cfgpath, "load", &out), 0);
    snprintf(want, sizeof(want), "seckill_producer: loaded version %d (was %d)", want_v, want_v - 1);
    if (!strstr(out, want) || !strstr(out, "seckill_lock: loaded version"))
        fail_msg("seckillctl functions load said: %s", out);
    free(out);
    assert_int_equal(ctl_functions(cfgpath, "check", &out), 0);
    free(out);

    /* 4. The producer starts and takes orders. */
    int64_t item = harness_item_create(cfgpath, 960000000 + (int64_t)util_rand_below(9999999), 100),
            u = 2000000 + (int64_t)util_rand_below(1000000);
    harness_bin("seckill-producer", bin, sizeof(bin));
    char *argv[] = { bin, "-c", cfgpath, NULL };
    unlink(plog);
    pid_t pid = harness_spawn(argv, plog);
    WAIT_UNTIL(order(port, u, item) == 202, 30000, ok);
    if (!ok)
        fail_msg("the producer did not take an order: %s; see %s", last_resp, plog);
    /* The metrics listener opens a moment after the buyers' one: -1 until then. */
    WAIT_UNTIL(sale_metric(mport, "seckill_producer_redis_functions_missing") == 0, 10000, ok);
    assert_true(ok);

    /* 5. The functions flushed under it (by the stack's user: no program's
     * may): 503, one line that says what is missing, the gauge. */
    freeReplyObject(harness_cmd(rc, "FUNCTION FLUSH"));
    WAIT_UNTIL(order(port, ++u, item) == 503, 15000, ok);
    assert_true(ok);
    WAIT_UNTIL(sale_metric(mport, "seckill_producer_redis_functions_missing") == 1, 15000, ok);
    assert_true(ok);
    assert_int_equal(order(port, ++u, item), 503);
    assert_int_equal(harness_file_lines(plog, "redis: the function seckill_reserve is not loaded (library "
                                              "seckill_producer"), 1);
    assert_int_equal(harness_file_lines(plog, "orders are refused (503) until it is back"), 1);
    assert_int_equal(kill(pid, 0), 0);

    /* 6. Loaded again: orders again, without a restart. */
    assert_int_equal(ctl_functions(cfgpath, "load", &out), 0);
    free(out);
    WAIT_UNTIL(order(port, ++u, item) == 202, 15000, ok);
    if (!ok)
        fail_msg("the producer did not take orders once the functions were back: %s; see %s", last_resp,
                 plog);
    assert_int_equal(sale_metric(mport, "seckill_producer_redis_functions_missing"), 0);
    assert_int_equal(harness_file_lines(plog, "connected again; orders are taken again"), 1);

    assert_int_equal(kill(pid, SIGTERM), 0);
    assert_int_equal(harness_wait_exit(pid, 30000), 0);
    redisFree(rc);
    assert_int_equal(kill(rpid, SIGTERM), 0);
    assert_int_equal(harness_wait_exit(rpid, 30000), 0);
    harness_pg_try(&harness_conf, "DELETE FROM items WHERE item_id = $1", item, 0);
    harness_sh("rm -rf '%s'", dir);
    unlink(cfgpath);
    cfg_free(&c);
}

/* --- a consumer whose Redis refuses it, again and again ------------------ */

static void acl_rule(const char *rule)
{
    redisContext *rc = harness_redis(&harness_conf);
    const char *argv[] = { "ACL", "SETUSER", user, rule };
    allowed(rc, 4, argv);
    redisFree(rc);
}

struct pipeline {
    struct cfg c;
    char cfgpath[128], clog[192], plog[192], pwfile[128];
    int port, cport; /* the producer's buyers' port, the consumer's metrics */
    pid_t prod, cons;
    int64_t item;
};

/* A producer (its own user) and a consumer as user, on a topic and group
 * of their own; returns once the consumer has partitions. */
static void pipeline_start(struct pipeline *p, const char *password)
{
    char bin[512], rnd[9];
    bool ok;
    assert_int_equal(util_random_hex(rnd, 4), 0);
    snprintf(p->pwfile, sizeof(p->pwfile), "/tmp/sktest-redis-cpw-%d", (int)getpid());
    harness_write_secret(p->pwfile, password);
    harness_cfg(&p->c);
    harness_set_str(&p->c.redis.key_prefix, harness_conf.redis.key_prefix);
    harness_set_str(&p->c.redis.user[CFG_ROLE_CONSUMER], user);
    harness_set_str(&p->c.redis.password_file[CFG_ROLE_CONSUMER], p->pwfile);
    free(p->c.kafka.topic);
    assert_true(asprintf(&p->c.kafka.topic, "sktest.redisacl.%d.%s", (int)getpid(), rnd) > 0);
    free(p->c.kafka.dlq_topic);
    assert_true(asprintf(&p->c.kafka.dlq_topic, "%s.dlq", p->c.kafka.topic) > 0);
    free(p->c.consumer.group_id);
    assert_true(asprintf(&p->c.consumer.group_id, "sktest-redisacl-%d-%s", (int)getpid(), rnd) > 0);
    harness_producer_ports(&p->c);
    p->port = p->c.producer.port;
    p->c.consumer.metrics_port = p->cport = harness_free_port();
    harness_cfg_file(&p->c, p->cfgpath, sizeof(p->cfgpath));
    assert_int_equal(harness_topic_create(&p->c, p->c.kafka.topic, 6), 0);
    assert_int_equal(harness_topic_create(&p->c, p->c.kafka.dlq_topic, 1), 0);
    p->item = harness_item_create(p->cfgpath, 960000000 + (int64_t)util_rand_below(9999999), 1000);
    snprintf(p->plog, sizeof(p->plog), "%s.producer.log", p->cfgpath);
    snprintf(p->clog, sizeof(p->clog), "%s.consumer.log", p->cfgpath);
    harness_bin("seckill-producer", bin, sizeof(bin));
    char *pargv[] = { bin, "-c", p->cfgpath, NULL };
    p->prod = harness_spawn(pargv, p->plog);
    harness_bin("seckill-consumer", bin, sizeof(bin));
    char *cargv[] = { bin, "-c", p->cfgpath, NULL };
    p->cons = harness_spawn(cargv, p->clog);
    WAIT_UNTIL(harness_http(p->port, "GET", "/healthz", NULL, NULL, NULL, 0) == 200 &&
                   sale_metric(p->cport, "seckill_consumer_assigned_partitions") > 0,
               60000, ok);
    if (!ok)
        fail_msg("the pipeline did not come up; see %s and %s", p->plog, p->clog);
}

static void pipeline_stop(struct pipeline *p)
{
    assert_int_equal(kill(p->prod, SIGTERM), 0);
    assert_int_equal(kill(p->cons, SIGTERM), 0);
    assert_int_equal(harness_wait_exit(p->prod, 30000), 0);
    assert_int_equal(harness_wait_exit(p->cons, 30000), 0);
    harness_topic_delete(&p->c, p->c.kafka.topic);
    harness_topic_delete(&p->c, p->c.kafka.dlq_topic);
    harness_pg_try(&harness_conf, "DELETE FROM orders WHERE item_id = $1", p->item, 0);
    harness_pg_try(&harness_conf, "DELETE FROM order_rejections WHERE item_id = $1", p->item, 0);
    harness_pg_try(&harness_conf, "DELETE FROM items WHERE item_id = $1", p->item, 0);
    unlink(p->pwfile);
    unlink(p->cfgpath);
    cfg_free(&p->c);
}

static int64_t persisted(const struct pipeline *p)
{
    return sale_metric(p->cport, "seckill_consumer_persisted_total");
}

/* A stuck dependency does not grow the consumer's log with its attempts:
 * its Redis user may no longer call functions (FCALL answers NOPERM, as
 * after an ACL change gone wrong), so every attempt of every worker to lock
 * a batch fails. While the workers retry,
 * the log grows by a few lines per worker, not one per attempt; once the
 * right is back the orders are persisted and the log says the failure is
 * over, with its count. */
static void test_consumer_stuck_redis_logs_once(void **state)
{
    (void)state;
    enum { ORDERS = 24, ATTEMPTS = 48, MAX_LINES = 20 };
    struct pipeline p;
    char pw[40], rnd[17];
    int64_t u = 3000000 + (int64_t)util_rand_below(1000000), errors0;
    int lines0;
    bool ok;
    assert_int_equal(util_random_hex(rnd, 8), 0);
    snprintf(user, sizeof(user), "sktest-consumer-%d", (int)getpid());
    snprintf(pw, sizeof(pw), "c-%s", rnd);
    user_create_as(CFG_ROLE_CONSUMER, pw);
    pipeline_start(&p, pw);
    assert_int_equal(order(p.port, u++, p.item), 202);
    WAIT_UNTIL(persisted(&p) >= 1, 30000, ok);
    assert_true(ok);

    acl_rule("-fcall");
    lines0 = harness_file_lines(p.clog, "");
    errors0 = sale_metric(p.cport, "seckill_consumer_redis_errors_total");
    for (int i = 0; i < ORDERS; i++)
        assert_int_equal(order(p.port, u++, p.item), 202);
    WAIT_UNTIL(sale_metric(p.cport, "seckill_consumer_redis_errors_total") >= errors0 + ATTEMPTS, 60000, ok);
    if (!ok)
        fail_msg("the consumer's workers did not fail %d times on Redis; see %s", ATTEMPTS, p.clog);
    assert_int_equal(persisted(&p), 1);
    int grown = harness_file_lines(p.clog, "") - lines0;
    if (grown > MAX_LINES)
        fail_msg("%d log lines for %d failed attempts (at most %d allowed); see %s", grown, ATTEMPTS, MAX_LINES,
                 p.clog);
    assert_true(harness_file_lines(p.clog, "NOPERM") >= 1);

    /* Healed: every order persisted, and the failure said over, counted. */
    acl_rule("+fcall");
    WAIT_UNTIL(persisted(&p) >= 1 + ORDERS && harness_over_count(p.clog, "NOPERM") > 1, 30000, ok);
    if (!ok)
        fail_msg("persisted %lld of %d, or no end of the failure logged; see %s", (long long)persisted(&p),
                 1 + ORDERS, p.clog);
    pipeline_stop(&p);
    redisContext *rc = harness_redis(&harness_conf);
    freeReplyObject(harness_cmd(rc, "ACL DELUSER %s", user));
    redisFree(rc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_producer_refused),
        cmocka_unit_test(test_consumer_refused),
        cmocka_unit_test(test_admin_refused),
        cmocka_unit_test(test_default_user_noauth),
        cmocka_unit_test(test_producer_wrong_password_then_reload_then_rotation),
        cmocka_unit_test(test_functions_missing_then_loaded),
        cmocka_unit_test(test_consumer_stuck_redis_logs_once),
    };
    harness_filter();
    return cmocka_run_group_tests_name("redisacl", tests, harness_setup, harness_teardown);
}
