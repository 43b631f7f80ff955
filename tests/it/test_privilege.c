/* Least privilege in PostgreSQL (issue #19): each program's role is refused
 * what it must not do, allowed what it does; a TCP login without a password
 * is refused. The grants are sql/migrations/007_roles_and_grants.sql; the
 * table is in docs/security.md. (That each program works end to end with
 * its own credentials is what every other suite shows.) */
#include "harness.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pgconn.h"
#include "secret.h"

static int64_t item;

/* units_back (sql/migrations/016_units_back.sql) called with no order: it
 * gives nothing back, whoever may call it. */
#define UNITS_BACK_NONE                                                                              \
    "SELECT units_back(ARRAY[]::bigint[], ARRAY[]::bigint[], ARRAY[]::bigint[], 'expired', $1::bigint)"

static PGconn *as(enum cfg_role r)
{
    PGconn *pg = NULL;
    char err[512];
    if (pgconn_open_as(&harness_conf, r, "test-privilege", &pg, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    return pg;
}

/* Run sql with up to one integer parameter; the SQLSTATE of its failure, or
 * "" when it ran. */
static const char *run(PGconn *pg, const char *sql, int64_t a, char *state, size_t len)
{
    char p[24];
    const char *params[] = { p };
    snprintf(p, sizeof(p), "%" PRId64, a);
    PGresult *r = PQexecParams(pg, sql, strstr(sql, "$1") ? 1 : 0, NULL, params, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(r);
    const char *s = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    snprintf(state, len, "%s", st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ? "" : s ? s : "?");
    PQclear(r);
    return state;
}

#define REFUSED(pg, sql, a)                                                        \
    do {                                                                           \
        char st_[8];                                                               \
        if (strcmp(run((pg), (sql), (a), st_, sizeof(st_)), "42501") != 0)          \
            fail_msg("%s: want SQLSTATE 42501, got '%s' (%s)", (sql), st_, PQerrorMessage(pg)); \
    } while (0)
#define ALLOWED(pg, sql, a)                                                        \
    do {                                                                           \
        char st_[8];                                                               \
        if (strcmp(run((pg), (sql), (a), st_, sizeof(st_)), "") != 0)               \
            fail_msg("%s: refused, SQLSTATE %s: %s", (sql), st_, PQerrorMessage(pg)); \
    } while (0)

static void test_producer_cannot_touch_orders(void **state)
{
    (void)state;
    PGconn *pg = as(CFG_ROLE_PRODUCER);
    REFUSED(pg, "INSERT INTO orders (order_id, user_id, item_id, reserved_at, fence) VALUES (1, 1, $1, now(), 1)",
            item);
    REFUSED(pg, "DELETE FROM orders WHERE item_id = $1", item);
    REFUSED(pg, "UPDATE orders SET fence = 0 WHERE item_id = $1", item);
    REFUSED(pg, "SELECT count(*) FROM orders WHERE item_id = $1", item);
    REFUSED(pg, "UPDATE items SET stock_left = 0 WHERE item_id = $1", item);
    REFUSED(pg, "SELECT count(*) FROM user_fences", 0);
    REFUSED(pg, "SELECT count(*) FROM order_deadlines", 0);
    REFUSED(pg, "CREATE TABLE sktest_producer_t (x int)", 0);
    REFUSED(pg, "SELECT block FROM order_id_blocks WHERE host = 'x'", 0); /* host is not readable */
    /* the consumer's give-back (migration 016): not the producer's to call */
    REFUSED(pg, UNITS_BACK_NONE, 0);
    /* what it does: take a block of order ids */
    PGresult *r = PQexecParams(pg, "INSERT INTO order_id_blocks (host, pid) VALUES ('test-privilege', 1) RETURNING block",
                               0, NULL, NULL, NULL, NULL, 0);
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    int64_t block = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    REFUSED(pg, "DELETE FROM order_id_blocks WHERE block = $1", block);
    PQfinish(pg);
    pg = as(CFG_ROLE_ADMIN);
    ALLOWED(pg, "DELETE FROM order_id_blocks WHERE block = $1", block);
    PQfinish(pg);
}

static void test_consumer_no_ddl_only_stock_left(void **state)
{
    (void)state;
    PGconn *pg = as(CFG_ROLE_CONSUMER);
    REFUSED(pg, "CREATE TABLE sktest_consumer_t (x int)", 0);
    REFUSED(pg, "CREATE TEMP TABLE sktest_consumer_tmp (x int)", 0);
    REFUSED(pg, "CREATE FUNCTION sktest_f() RETURNS int LANGUAGE sql AS 'SELECT 1'", 0);
    REFUSED(pg, "ALTER TABLE orders ADD COLUMN sktest int", 0);
    REFUSED(pg, "DROP TABLE order_rejections", 0);
    REFUSED(pg, "UPDATE items SET name = 'stolen' WHERE item_id = $1", item);
    REFUSED(pg, "UPDATE items SET stock_total = 0 WHERE item_id = $1", item);
    REFUSED(pg, "DELETE FROM items WHERE item_id = $1", item);
    REFUSED(pg, "INSERT INTO items (item_id, stock_total, stock_left) VALUES ($1::bigint + 1, 1, 1)", item);
    REFUSED(pg, "DELETE FROM orders WHERE item_id = $1", item);
    REFUSED(pg, "UPDATE orders SET user_id = 1 WHERE item_id = $1", item);
    REFUSED(pg, "SELECT count(*) FROM order_rejections", 0);
    /* the order id blocks (migration 015): the highest block, to refuse a
     * payment for an id never issued; not who took them, and no block */
    ALLOWED(pg, "SELECT coalesce(max(block), 0) FROM order_id_blocks WHERE $1::bigint > 0", item);
    REFUSED(pg, "SELECT host FROM order_id_blocks WHERE $1::bigint > 0", item);
    REFUSED(pg, "INSERT INTO order_id_blocks (host, pid) VALUES ('sktest', $1::integer)", 1);
    REFUSED(pg, "SELECT fence_advance('sktest', 1)", 0);
    REFUSED(pg, "SELECT * FROM inspect_sold", 0);
    /* the give-back of the expiry and the cancels (migration 016), with its rights */
    ALLOWED(pg, UNITS_BACK_NONE, 0);
    ALLOWED(pg, "UPDATE items SET stock_left = stock_left - 1 WHERE item_id = $1", item);
    ALLOWED(pg, "SELECT stock_left FROM items WHERE item_id = $1 FOR NO KEY UPDATE", item);
    /* the expiry's deadlines (migration 012): taken FOR UPDATE and deleted, never rewritten */
    REFUSED(pg, "UPDATE order_deadlines SET order_id = order_id WHERE order_id = $1", item);
    ALLOWED(pg, "SELECT order_id FROM order_deadlines WHERE order_id = $1 FOR UPDATE SKIP LOCKED", item);
    ALLOWED(pg, "DELETE FROM order_deadlines WHERE order_id = $1", item);
    PQfinish(pg);
    pg = as(CFG_ROLE_ADMIN);
    char st[8];
    assert_string_equal(run(pg, "SELECT 1 FROM items WHERE item_id = $1 AND stock_left = 4 AND name = 'privilege test'",
                            item, st, sizeof(st)), "");
    PQfinish(pg);
}

/* A TCP login that gives no password is refused for every role, the
 * superuser's included; so is a wrong one. */
static void test_tcp_needs_a_password(void **state)
{
    (void)state;
    const char *users[] = { harness_conf.postgres.user[CFG_ROLE_ADMIN], harness_conf.postgres.user[CFG_ROLE_CONSUMER],
                            "postgres" };
    for (size_t i = 0; i < ARRAY_SIZE(users); i++)
        for (int wrong = 0; wrong < 2; wrong++) {
            const char *keys[] = { "host", "port", "dbname", "user", "password", "passfile", "sslmode",
                                   "sslrootcert", "connect_timeout", NULL };
            const char *vals[] = { "127.0.0.1", harness_conf.postgres.port, harness_conf.postgres.dbname, users[i],
                                   wrong ? "not-the-password" : "", "/nonexistent", harness_conf.postgres.sslmode,
                                   harness_conf.postgres.sslrootcert, "5", NULL };
            PGconn *pg = PQconnectdbParams(keys, vals, 0);
            assert_int_not_equal(PQstatus(pg), CONNECTION_OK);
            const char *m = PQerrorMessage(pg);
            if (!strstr(m, wrong ? "password authentication failed" : "no password supplied"))
                fail_msg("%s (%s): %s", users[i], wrong ? "wrong password" : "no password", m);
            PQfinish(pg);
        }
}

/* TLS or nothing: the right password over plain TCP is refused. */
static void test_tcp_needs_tls(void **state)
{
    (void)state;
    struct secret *pw = secret_dup(harness_conf.postgres.password[CFG_ROLE_ADMIN]);
    assert_non_null(pw);
    const char *keys[] = { "host", "port", "dbname", "user", "password", "sslmode", "connect_timeout", NULL };
    const char *vals[] = { "127.0.0.1", harness_conf.postgres.port, harness_conf.postgres.dbname,
                           harness_conf.postgres.user[CFG_ROLE_ADMIN], secret_str(pw), "disable", "5", NULL };
    PGconn *pg = PQconnectdbParams(keys, vals, 0);
    secret_free(pw);
    assert_int_not_equal(PQstatus(pg), CONNECTION_OK);
    if (!strstr(PQerrorMessage(pg), "no encryption"))
        fail_msg("plain TCP: %s", PQerrorMessage(pg));
    PQfinish(pg);
    /* the same over TLS, the certificate checked: in, and encrypted */
    pg = as(CFG_ROLE_ADMIN);
    assert_int_equal(PQsslInUse(pg), 1);
    PQfinish(pg);
}

/* A producer started with a wrong PostgreSQL password waits (its first
 * step takes a block of order ids), says so once, and on SIGHUP with the
 * file put right takes the block and starts: the reload is taken between
 * attempts, not only once it runs. */
static void test_producer_wrong_password_at_start(void **state)
{
    (void)state;
    struct cfg c;
    char pwfile[128], cfgpath[256], log[256], bin[512], wrong[48], rnd[17], err[512];
    struct secret *right = NULL;
    bool ok;
    assert_int_equal(util_random_hex(rnd, 8), 0);
    snprintf(wrong, sizeof(wrong), "wrong-%s", rnd);
    if (harness_stack_secret("pg-producer", &right, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    snprintf(pwfile, sizeof(pwfile), "/tmp/sktest-pg-pw-%d", (int)getpid());
    harness_write_secret(pwfile, wrong);
    harness_cfg(&c);
    harness_set_str(&c.postgres.password_file[CFG_ROLE_PRODUCER], pwfile);
    harness_producer_ports(&c);
    int port = c.producer.port;
    harness_cfg_file(&c, cfgpath, sizeof(cfgpath));
    snprintf(log, sizeof(log), "/tmp/seckill-test-privilege-%d.log", port);
    unlink(log);
    harness_bin("seckill-producer", bin, sizeof(bin));
    char *argv[] = { bin, "-c", cfgpath, NULL };
    pid_t pid = harness_spawn(argv, log);

    WAIT_UNTIL(harness_file_lines(log, "password authentication failed") >= 1, 30000, ok);
    if (!ok)
        fail_msg("the producer did not report its refused password; see %s", log);
    assert_true(harness_http(port, "GET", "/healthz", NULL, NULL, NULL, 0) < 0); /* not serving yet */
    assert_int_equal(kill(pid, 0), 0);

    harness_write_secret(pwfile, secret_str(right));
    assert_int_equal(kill(pid, SIGHUP), 0);
    WAIT_UNTIL(harness_http(port, "GET", "/healthz", NULL, NULL, NULL, 0) == 200, 60000, ok);
    if (!ok)
        fail_msg("the producer did not start after SIGHUP; see %s", log);
    assert_int_equal(harness_file_lines(log, "password authentication failed"), 1);
    assert_int_equal(harness_file_lines(log, "order ids: ok after"), 1);
    assert_int_equal(harness_file_lines(log, wrong), 0);
    assert_int_equal(harness_file_lines(log, secret_str(right)), 0);
    assert_int_equal(kill(pid, SIGTERM), 0);
    assert_int_equal(harness_wait_exit(pid, 30000), 0);
    secret_free(right);
    unlink(pwfile);
    unlink(cfgpath);
    unlink(log);
    cfg_free(&c);
}

static int setup(void **state)
{
    harness_setup(state);
    item = 970000000000LL + (int64_t)util_rand_below(9999999999ULL);
    harness_pg_try(&harness_conf, "INSERT INTO items (item_id, name, stock_total, stock_left) VALUES ($1, "
                                  "'privilege test', 5, 5)", item, 0);
    return 0;
}

static int teardown(void **state)
{
    harness_pg_try(&harness_conf, "DELETE FROM items WHERE item_id = $1", item, 0);
    return harness_teardown(state);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_producer_cannot_touch_orders),
        cmocka_unit_test(test_consumer_no_ddl_only_stock_left),
        cmocka_unit_test(test_tcp_needs_a_password),
        cmocka_unit_test(test_tcp_needs_tls),
        cmocka_unit_test(test_producer_wrong_password_at_start),
    };
    harness_filter();
    return cmocka_run_group_tests_name("privilege", tests, setup, teardown);
}
