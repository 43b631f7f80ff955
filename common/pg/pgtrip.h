/* pgtrip: a pipelined round trip on a session (pgsess.h), and the one
 * policy that tells a failure the server will get over from one it never
 * will.
 *
 * Statements are queued one after the other without waiting (the session's
 * by name, constant ones by their text), each with the status it must
 * answer; pgtrip_run sends one sync and reads every result: one round trip
 * for them all. Without a BEGIN the statements of a trip are one implicit
 * transaction (the server commits them together at the sync); with one,
 * the transaction spans trips until COMMIT or pgtrip_rollback.
 *
 * A failure is classified once, here (pgtrip_class): TRANSIENT when the
 * connection is lost or the server may well take the same statement later
 * (serialization, deadlock, shutting down, out of resources, lock timeout,
 * a statement cancelled, a session ended for idling in its transaction):
 * retry it, after a backoff; DATA when the server refused the statement
 * for what it is or carries: the same statement fails again, so the caller
 * isolates what it carries (sink: the batch again one order at a time, the
 * order refused alone dead-lettered) instead of retrying it forever. A
 * statement that cannot be queued (out of memory, libpq refusing it) makes
 * the trip fail as TRANSIENT when run, so a caller queues a whole trip and
 * checks once. A connection lost, or whose replies are out of step, is
 * dropped (the server rolls back what it held); the session connects again
 * on its next pgsess_ready.
 *
 * A trip is reused from one round trip to the next (pgtrip_reset); its
 * results live until then. It belongs to its session's thread. */
#ifndef SECKILL_PGTRIP_H
#define SECKILL_PGTRIP_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

#include "pgarr.h"
#include "pgsess.h"

enum pgt_status {
    PGT_OK = 0,    /* every statement answered its wanted status */
    PGT_TRANSIENT, /* connection, serialization, deadlock, shutdown, resources, lock timeout, a cancel,
                    * or not queued */
    PGT_DATA,      /* the server refused a statement for what it is or carries */
};

/* The most parameters of a statement. */
#define PGTRIP_PARAMS_MAX 8

/* A statement's parameter: an array (pgarr_end'ed), sent in binary; or,
 * when arr is NULL, a value in text. */
struct pgparam {
    const struct pgarr *arr;
    const char *text;
};

struct pgtrip_stmt {
    const char *name;     /* the prepared statement's name, or the constant statement */
    ExecStatusType want;
    PGresult *r;          /* after pgtrip_run */
};

struct pgtrip {
    struct pgsess *s;
    struct pgtrip_stmt *st; /* st[0..n): the statements queued, in order */
    int n, cap;
    bool bad;           /* a statement was not queued: why says why */
    char why[160];
    bool synced;        /* pgtrip_run sent the sync: the server answers every statement */
    int failed;         /* after pgtrip_run: the statement that failed first, or -1 */
};

/* The class of a failure whose SQLSTATE is state (NULL, no SQLSTATE: a
 * connection lost): PGT_TRANSIENT for 08 (connection), 40001
 * (serialization), 40P01 (deadlock), 57P (shutdown, not accepting
 * connections yet), 53 (out of resources), 55P03 (lock timeout), 57014
 * (cancelled, or statement_timeout); PGT_DATA for every other. */
enum pgt_status pgtrip_class(const char *state);

void pgtrip_init(struct pgtrip *t, struct pgsess *s);
/* Free the trip's results and room (pgtrip_reset first). */
void pgtrip_free(struct pgtrip *t);
/* The results freed, ready for the next trip. Statements queued and not
 * run leave the pipeline out of step: the connection is dropped then. */
void pgtrip_reset(struct pgtrip *t);

/* Queue a constant statement without parameters ("BEGIN", "COMMIT"). Its
 * index in the trip, or -1 (pgtrip_run then fails: PGT_TRANSIENT). The
 * session must be ready (pgsess_ready). */
int pgtrip_sql(struct pgtrip *t, const char *sql, ExecStatusType want);
/* Queue the session's statement name (pgsess_conf.stmts) with its n
 * parameters p (at most PGTRIP_PARAMS_MAX). Its index, or -1 (as
 * pgtrip_sql; an array that failed counts as out of memory). */
int pgtrip_params(struct pgtrip *t, const char *name, const struct pgparam *p, int n, ExecStatusType want);
/* The same for a statement whose parameters are all arrays: a[0..n). */
int pgtrip_arrays(struct pgtrip *t, const char *name, const struct pgarr *const *a, int n,
                  ExecStatusType want);

/* Send the sync and read every result. PGT_OK when each statement answered
 * its wanted status. Otherwise the class of the first failure (the
 * statements after it, skipped by the server, come back
 * PGRES_PIPELINE_ABORTED), and err says which statement and why; a
 * connection lost, out of step or a trip not queued whole drops the
 * connection (PGT_TRANSIENT). A transaction the trip left open (aborted or
 * not) is the caller's to end: pgtrip_rollback. */
enum pgt_status pgtrip_run(struct pgtrip *t, char *err, size_t errlen);
/* Statement i's result (valid until pgtrip_reset). */
PGresult *pgtrip_result(const struct pgtrip *t, int i);

/* After a failure: the trip reset, and the transaction ended if one is
 * open, aborted or not (a ROLLBACK of its own round trip); a connection
 * that cannot even roll back is dropped (the server rolls back when it
 * goes). */
void pgtrip_rollback(struct pgtrip *t);

/* pgtrip_run for a caller that retries whatever failed after a backoff of
 * its own (it has nothing to set aside): a failure rolls back
 * (pgtrip_rollback) and is said once while it lasts in *say: a transient
 * one as a warning, "<who>: postgres: <what>: <why>; retried"; one the
 * server refused for what it carries as an error an operator must look at
 * (the same statement will be refused again), "<who>: postgres refused
 * <what>: <why>; retried after the backoff". PGT_OK, the results in the
 * trip until pgtrip_reset; or the failure's class. */
enum pgt_status pgtrip_run_said(struct pgtrip *t, struct log_repeat *say, const char *who, const char *what);

#endif
