/* Least privilege in Redis (issue #19): each program's ACL user is refused
 * what it must not do (NOPERM), the default user lets nobody in (NOAUTH),
 * and a producer whose password is wrong, then put right in its file and
 * reloaded (SIGHUP), or rotated, recovers without a restart, logging one
 * line per state change and never the password, and a consumer whose user
 * may no longer load scripts logs it once while it lasts, not once per
 * attempt. The rules are written by
 * scripts/stack.d/redis.sh (redis_acl_rules); the table is in docs/security.md. (That
 * each program works end to end with its own user is what every other
 * suite shows.) */
#include "harness.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "embed.h"
#include "keys.h"
#include "rconn.h"
#include "sale.h"
#include "script.h"
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
    REFUSED(rc, "EVAL", "return 1", "0");
}

static void test_producer_refused(void **state)
{
    (void)state;
    char lk[KEYS_MAX], stock[KEYS_MAX], window[KEYS_MAX];
    const char *p = harness_conf.redis.key_prefix;
    assert_true(keys_lock(lk, sizeof(lk), p, "acl-test") > 0);
    assert_true(keys_item(stock, sizeof(stock), p, 1, KEYS_ITEM_STOCK) > 0);
    assert_true(keys_item(window, sizeof(window), p, 1, KEYS_ITEM_WINDOW) > 0);
    redisContext *rc = as(CFG_ROLE_PRODUCER);
    no_server_commands(rc);
    REFUSED(rc, "HSET", lk, "acl-test", "x");
    REFUSED(rc, "HGET", lk, "acl-test");
    /* no string writes: the order index is a hash (orderidx.h), so nothing
     * lets the producer set an item's stock by hand */
    REFUSED(rc, "SET", stock, "1000000");
    /* a script is checked against the keys it declares */
    struct script acq = SCRIPT_INIT("lock_acquire", embed_lock_acquire);
    const char *argv[] = { lk, "owner", "10000", "86400000", "acl-test", "req" };
    redisReply *r = script_eval(rc, &acq, 1, 5, argv, NULL);
    assert_non_null(r);
    if (r->type != REDIS_REPLY_ERROR || strncmp(r->str, "NOPERM", 6) != 0)
        fail_msg("lock_acquire.lua on %s as producer: want NOPERM, got %s", lk,
                 r->type == REDIS_REPLY_ERROR ? r->str : "a reply");
    freeReplyObject(r);
    /* what it does */
    ALLOWED(rc, "GET", stock);
    ALLOWED(rc, "HMGET", window, "starts_ms", "ends_ms");
    ALLOWED(rc, "PING");
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
    redisContext *rc = as(CFG_ROLE_CONSUMER);
    no_server_commands(rc);
    REFUSED(rc, "INCR", stock); /* it only asks whether the stock is there (EXISTS) */
    REFUSED(rc, "DECRBY", stock, "5");
    REFUSED(rc, "SADD", buyers, "1"); /* the buyers are the producer's */
    REFUSED(rc, "SMEMBERS", buyers);
    ALLOWED(rc, "EXISTS", stock);
    ALLOWED(rc, "HSET", orders, "o:1", "x");
    ALLOWED(rc, "HMGET", lk, "acl-test", "{fence}");
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
    /* "user NAME on #hash rules...": the rules, without the password */
    const char *argv[128];
    char *copy = strdup(line), *save = NULL, pw[128];
    int n = 0, word = 0;
    argv[n++] = "ACL";
    argv[n++] = "SETUSER";
    argv[n++] = user;
    argv[n++] = "reset";
    for (char *t = strtok_r(copy, " ", &save); t; t = strtok_r(NULL, " ", &save), word++)
        if (word >= 2 && t[0] != '#' && t[0] != '>' && n < 126)
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
    assert_int_equal(sale_metric(mport, "seckill_producer_redis_up"), 1);
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

/* --- a consumer whose Redis refuses it, again and again ------------------ */

/* The largest count of the log's "<key>: over (...) after N times" lines
 * that contain needle; -1 when there is none. */
static long long over_count(const char *path, const char *needle)
{
    char line[4096];
    long long n = -1;
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f)) {
        const char *a = strstr(line, needle);
        long long k;
        if (a && (a = strstr(a, ") after ")) && sscanf(a, ") after %lld time", &k) == 1 && k > n)
            n = k;
    }
    fclose(f);
    return n;
}

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
 * its Redis user may no longer load scripts (SCRIPT LOAD answers NOPERM)
 * and Redis has lost them (SCRIPT FLUSH, as after a restart), so every
 * attempt of every worker to lock a batch fails. While the workers retry,
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

    acl_rule("-script|load");
    redisContext *rc = harness_redis(&harness_conf);
    freeReplyObject(harness_cmd(rc, "SCRIPT FLUSH"));
    redisFree(rc);
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
    assert_true(harness_file_lines(p.clog, "SCRIPT LOAD failed: NOPERM") >= 1);

    /* Healed: every order persisted, and the failure said over, counted. */
    acl_rule("+script|load");
    WAIT_UNTIL(persisted(&p) >= 1 + ORDERS && over_count(p.clog, "SCRIPT LOAD failed: NOPERM") > 1, 30000, ok);
    if (!ok)
        fail_msg("persisted %lld of %d, or no end of the failure logged; see %s", (long long)persisted(&p),
                 1 + ORDERS, p.clog);
    pipeline_stop(&p);
    rc = harness_redis(&harness_conf);
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
        cmocka_unit_test(test_consumer_stuck_redis_logs_once),
    };
    harness_filter();
    return cmocka_run_group_tests_name("redisacl", tests, harness_setup, harness_teardown);
}
