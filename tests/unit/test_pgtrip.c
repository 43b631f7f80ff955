/* pgtrip (common/pg/pgtrip.h): the one policy that tells a failure the
 * server will get over (retry) from a refusal of what a statement carries
 * (isolate it), by SQLSTATE; and a trip that cannot be queued whole fails
 * as transient, never half-sent. No server: the statements are queued on a
 * session that is not connected. */
#include "harness.h"

#include <string.h>

#include "pgarr.h"
#include "pgsess.h"
#include "pgtrip.h"

static void test_class(void **state)
{
    (void)state;
    const char *transient[] = {
        "08000", "08003", "08006", "08001", "08P01", /* connection */
        "40001",                                     /* serialization_failure */
        "40P01",                                     /* deadlock_detected */
        "57P01", "57P02", "57P03", "57P04",          /* admin/crash shutdown, cannot connect now */
        "53000", "53100", "53200", "53300",          /* out of resources: disk, memory, connections */
        "55P03",                                     /* lock_not_available (lock_timeout) */
        "57014",                                     /* query_canceled: a cancel or statement_timeout */
        "25P03", "25P04",                            /* the session ended: idle in transaction, too long */
    };
    const char *data[] = {
        "23505", "23514", "23503", "23502", /* unique, check, foreign key, not null */
        "22003", "22008", "22P02", "22001", /* out of range, datetime overflow, bad text, too long */
        "42501", "42P01", "42883", "42703", /* privilege, no table, no function, no column */
        "40002",                            /* transaction_integrity_constraint_violation: not 40001 */
        "55000", "55006",                   /* object not in prerequisite state, object in use */
        "25P02", "XX000", "P0001",          /* in failed transaction, internal, raise_exception */
    };
    for (size_t i = 0; i < ARRAY_SIZE(transient); i++)
        if (pgtrip_class(transient[i]) != PGT_TRANSIENT)
            fail_msg("SQLSTATE %s is not classified transient", transient[i]);
    for (size_t i = 0; i < ARRAY_SIZE(data); i++)
        if (pgtrip_class(data[i]) != PGT_DATA)
            fail_msg("SQLSTATE %s is not classified data", data[i]);
    /* no SQLSTATE at all: the connection went */
    assert_int_equal(pgtrip_class(NULL), PGT_TRANSIENT);
}

/* Statements queued on a session with no connection are not queued; the
 * run says so, as transient, and the trip is ready again. */
static void test_not_connected(void **state)
{
    (void)state;
    struct pgsess s;
    struct pgtrip t;
    struct pgsess_conf conf = { .appname = "test_pgtrip" };
    char err[256] = "";
    pgsess_init(&s, &harness_conf, &conf);
    pgtrip_init(&t, &s);
    assert_int_equal(pgtrip_sql(&t, "BEGIN", PGRES_COMMAND_OK), -1);
    assert_int_equal(pgtrip_run(&t, err, sizeof(err)), PGT_TRANSIENT);
    assert_non_null(strstr(err, "BEGIN: not connected"));
    pgtrip_reset(&t);
    assert_int_equal(t.n, 0);
    assert_false(t.bad);
    pgtrip_free(&t);
    pgsess_close(&s);
}

/* An array that could not be built is never sent: the statement is not
 * queued (out of memory), and the trip fails as transient. */
static void test_failed_array(void **state)
{
    (void)state;
    struct pgsess s;
    struct pgtrip t;
    struct pgsess_conf conf = { .appname = "test_pgtrip" };
    struct pgarr a = { 0 };
    char err[256] = "";
    pgsess_init(&s, &harness_conf, &conf);
    pgtrip_init(&t, &s);
    pgarr_begin(&a, PGARR_TEXT);
    pgarr_add_text(&a, "x", (size_t)1 << 30);
    assert_int_equal(pgarr_end(&a), -1);
    const struct pgarr *const p[] = { &a };
    assert_int_equal(pgtrip_arrays(&t, "late", p, 1, PGRES_COMMAND_OK), -1);
    assert_int_equal(pgtrip_run(&t, err, sizeof(err)), PGT_TRANSIENT);
    assert_non_null(strstr(err, "late: out of memory"));
    pgarr_free(&a);
    pgtrip_free(&t);
    pgsess_close(&s);
}

/* A name the session does not know is never sent. */
static void test_unknown_statement(void **state)
{
    (void)state;
    static const struct pgsess_stmt stmts[] = { { "fence", "SELECT 1", 0, false } };
    struct pgsess s;
    struct pgtrip t;
    struct pgsess_conf conf = { .appname = "test_pgtrip", .stmts = stmts, .nstmts = 1 };
    char err[256] = "";
    pgsess_init(&s, &harness_conf, &conf);
    pgtrip_init(&t, &s);
    assert_non_null(pgsess_stmt(&s, "fence"));
    assert_null(pgsess_stmt(&s, "fences"));
    assert_int_equal(pgtrip_params(&t, "fences", NULL, 0, PGRES_TUPLES_OK), -1);
    assert_int_equal(pgtrip_run(&t, err, sizeof(err)), PGT_TRANSIENT);
    assert_non_null(strstr(err, "fences: not a statement of the session"));
    pgtrip_free(&t);
    pgsess_close(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_class),
        cmocka_unit_test(test_not_connected),
        cmocka_unit_test(test_failed_array),
        cmocka_unit_test(test_unknown_statement),
    };
    return cmocka_run_group_tests_name("pgtrip", tests, NULL, NULL);
}
