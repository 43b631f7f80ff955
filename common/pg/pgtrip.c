#include "pgtrip.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum pgt_status pgtrip_class(const char *state)
{
    /* 08 connection, 40001 serialization, 40P01 deadlock, 57P0x shutdown or
     * not accepting connections yet, 53 out of resources, 55P03 lock timeout,
     * 57014 a statement cancelled (an operator's pg_cancel_backend, a
     * statement_timeout), 25P03 and 25P04 a session the server ended for
     * idling in a transaction or for the transaction's length (a worker
     * frozen past its lease reads that error on waking, before its own
     * check of the lease): none is the data's fault, and a batch taken apart
     * for it would dead-letter sound messages (one alone at once). */
    if (state == NULL || strncmp(state, "08", 2) == 0 || strcmp(state, "40001") == 0 ||
        strcmp(state, "40P01") == 0 || strncmp(state, "57P", 3) == 0 || strncmp(state, "53", 2) == 0 ||
        strcmp(state, "55P03") == 0 || strcmp(state, "57014") == 0 || strcmp(state, "25P03") == 0 ||
        strcmp(state, "25P04") == 0)
        return PGT_TRANSIENT;
    return PGT_DATA;
}

void pgtrip_init(struct pgtrip *t, struct pgsess *s)
{
    memset(t, 0, sizeof(*t));
    t->s = s;
    t->failed = -1;
}

void pgtrip_reset(struct pgtrip *t)
{
    if (t->n > 0 && !t->synced)
        pgsess_drop(t->s);
    for (int i = 0; i < t->n; i++)
        PQclear(t->st[i].r);
    t->n = 0;
    t->bad = t->synced = false;
    t->why[0] = '\0';
    t->failed = -1;
}

void pgtrip_free(struct pgtrip *t)
{
    pgtrip_reset(t);
    free(t->st);
    t->st = NULL;
    t->cap = 0;
}

/* A statement not queued: the trip fails when run (the first reason kept). */
static int not_queued(struct pgtrip *t, const char *name, const char *why)
{
    if (!t->bad) {
        if (why)
            snprintf(t->why, sizeof(t->why), "%s: %s", name, why);
        else
            pgsess_error(t->why, sizeof(t->why), name, t->s->pg, NULL);
    }
    t->bad = true;
    return -1;
}

/* Room for one more statement. 0, or -1 out of memory. */
static int room(struct pgtrip *t)
{
    if (t->n < t->cap)
        return 0;
    int cap = t->cap ? 2 * t->cap : 8;
    struct pgtrip_stmt *st = realloc(t->st, (size_t)cap * sizeof(*st));
    if (!st)
        return -1;
    t->st = st;
    t->cap = cap;
    return 0;
}

/* Queue through libpq: the session's statement name, or the constant sql. */
static int queue(struct pgtrip *t, const char *name, const char *sql, int n, const char *const *vals,
                 const int *lens, const int *fmts, ExecStatusType want)
{
    const char *what = name ? name : sql;
    const struct pgsess_stmt *st = name ? pgsess_stmt(t->s, name) : NULL;
    int ok;
    if (t->bad)
        return -1;
    if (name && !st)
        return not_queued(t, what, "not a statement of the session");
    if (!t->s->pg)
        return not_queued(t, what, "not connected");
    if (room(t) != 0)
        return not_queued(t, what, "out of memory");
    if (st && !st->plan_each_run)
        ok = PQsendQueryPrepared(t->s->pg, name, n, vals, lens, fmts, 0);
    else
        ok = PQsendQueryParams(t->s->pg, st ? st->sql : sql, n, NULL, vals, lens, fmts, 0);
    if (!ok)
        return not_queued(t, what, NULL);
    t->st[t->n] = (struct pgtrip_stmt){ what, want, NULL };
    return t->n++;
}

int pgtrip_sql(struct pgtrip *t, const char *sql, ExecStatusType want)
{
    return queue(t, NULL, sql, 0, NULL, NULL, NULL, want);
}

int pgtrip_params(struct pgtrip *t, const char *name, const struct pgparam *p, int n, ExecStatusType want)
{
    const char *vals[PGTRIP_PARAMS_MAX];
    int lens[PGTRIP_PARAMS_MAX], fmts[PGTRIP_PARAMS_MAX];
    if (n > PGTRIP_PARAMS_MAX)
        return not_queued(t, name, "too many parameters");
    for (int i = 0; i < n; i++) {
        const struct pgarr *a = p[i].arr;
        if (a && (a->failed || !a->data))
            return not_queued(t, name, "out of memory");
        vals[i] = a ? (const char *)a->data : p[i].text;
        lens[i] = a ? (int)a->len : 0;
        fmts[i] = a ? 1 : 0;
    }
    return queue(t, name, NULL, n, vals, lens, fmts, want);
}

int pgtrip_arrays(struct pgtrip *t, const char *name, const struct pgarr *const *a, int n,
                  ExecStatusType want)
{
    struct pgparam p[PGTRIP_PARAMS_MAX];
    if (n > PGTRIP_PARAMS_MAX)
        return not_queued(t, name, "too many parameters");
    for (int i = 0; i < n; i++)
        p[i] = (struct pgparam){ a[i], NULL };
    return pgtrip_params(t, name, p, n, want);
}

PGresult *pgtrip_result(const struct pgtrip *t, int i)
{
    return i >= 0 && i < t->n ? t->st[i].r : NULL;
}

/* Why a statement failed: PGT_TRANSIENT or PGT_DATA. */
static enum pgt_status classify(PGconn *pg, const PGresult *r)
{
    if (PQstatus(pg) != CONNECTION_OK)
        return PGT_TRANSIENT;
    return pgtrip_class(r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL);
}

/* The results of the trip's statements, one each then NULL, and the
 * sync's. PGT_OK or the first failure's class (t->failed, err); -1 when
 * the replies are out of step. */
static int read_results(struct pgtrip *t, char *err, size_t errlen)
{
    PGconn *pg = t->s->pg;
    enum pgt_status status = PGT_OK;
    PGresult *r;
    for (int i = 0; i < t->n; i++) {
        if ((t->st[i].r = PQgetResult(pg)) == NULL)
            return -1;
        if ((r = PQgetResult(pg)) != NULL) { /* one result per statement, then NULL */
            PQclear(r);
            return -1;
        }
        if (t->failed < 0 && PQresultStatus(t->st[i].r) != t->st[i].want) {
            t->failed = i;
            pgsess_error(err, errlen, t->st[i].name, pg, t->st[i].r);
            status = classify(pg, t->st[i].r);
        }
    }
    r = PQgetResult(pg);
    bool synced = PQresultStatus(r) == PGRES_PIPELINE_SYNC;
    PQclear(r);
    return synced ? (int)status : -1;
}

enum pgt_status pgtrip_run(struct pgtrip *t, char *err, size_t errlen)
{
    int st;
    t->failed = -1;
    if (t->bad) {
        snprintf(err, errlen, "%s", t->why);
        goto drop;
    }
    t->synced = true;
    if (!t->s->pg || !PQpipelineSync(t->s->pg)) {
        pgsess_error(err, errlen, "pipeline", t->s->pg, NULL);
        goto drop;
    }
    if ((st = read_results(t, err, errlen)) < 0) {
        pgsess_error(err, errlen, "pipeline", t->s->pg, NULL);
        goto drop;
    }
    if (t->failed >= 0 && PQstatus(t->s->pg) != CONNECTION_OK)
        goto drop;
    return (enum pgt_status)st;
drop:
    /* Statements queued without their sync, or replies out of step: the
     * pipeline cannot be trusted; the server rolls back. */
    pgsess_drop(t->s);
    t->synced = true; /* nothing left to drop in pgtrip_reset */
    return PGT_TRANSIENT;
}

void pgtrip_rollback(struct pgtrip *t)
{
    char e[8];
    pgtrip_reset(t);
    if (!t->s->pg || PQtransactionStatus(t->s->pg) == PQTRANS_IDLE)
        return;
    if (pgtrip_sql(t, "ROLLBACK", PGRES_COMMAND_OK) < 0 || pgtrip_run(t, e, sizeof(e)) != PGT_OK)
        pgsess_drop(t->s);
    pgtrip_reset(t);
}

enum pgt_status pgtrip_run_said(struct pgtrip *t, struct log_repeat *say, const char *who, const char *what)
{
    char err[512], key[LOG_REPEAT_KEY_MAX];
    enum pgt_status st = pgtrip_run(t, err, sizeof(err));
    if (st == PGT_OK)
        return PGT_OK;
    pgtrip_rollback(t);
    if (st == PGT_DATA) {
        snprintf(key, sizeof(key), "%s: postgres refused", who);
        log_repeat(say, LOG_LVL_ERROR, key,
                   "%s: postgres refused %s: %s; retried after the backoff (logged once while it lasts)", who,
                   what, err);
    } else {
        snprintf(key, sizeof(key), "%s: postgres", who);
        log_repeat(say, LOG_LVL_WARNING, key, "%s: postgres: %s: %s; retried (logged once while it lasts)",
                   who, what, err);
    }
    return st;
}
