/* pgsess: one thread's PostgreSQL session, connected on use and connected
 * again after a loss, ready for pipelined round trips (pgtrip.h).
 *
 * Connecting (pgconn: the program's role, keyword/value parameters) is
 * followed by what every new connection needs before its first trip: the
 * session settings statement, when the caller gives one, with its text
 * parameters; the caller's statements prepared under their names (but
 * those planned at each run); then pipeline mode, in which every statement of the session goes from then on
 * (PQexec* is refused in it: use pgtrip). A database that is down or
 * refuses the password is a state to wait out, not a failure: pgsess_ready
 * tries again at each call, and, given a log_repeat of the caller's, says
 * the failure once while it lasts (the caller ends that state, with
 * log_repeat_end, once its own work goes through).
 *
 * The caller's strings (statements, their names, settings, say) must outlive
 * the session. A session and its trips belong to one thread. */
#ifndef SECKILL_PGSESS_H
#define SECKILL_PGSESS_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

#include "cfg.h"
#include "log.h"

/* The most text parameters of the session settings statement. */
#define PGSESS_SETTINGS_MAX 2

/* A statement of the session, run by name (pgtrip_params). Its parameters'
 * types come from its SQL ($1::bigint[]). Prepared once per connection, and
 * then planned as the server's plan cache decides (a generic plan after a
 * few runs); or, plan_each_run, sent with its text each time (an unnamed
 * statement, as PQexecParams sends it) and planned for the values it is
 * given: for a statement whose best plan depends on how many ids an array
 * holds, which a generic plan does not know. */
struct pgsess_stmt {
    const char *name;
    const char *sql;
    int nparams;
    bool plan_each_run;
};

struct pgsess_conf {
    const char *appname;      /* application_name: what pg_stat_activity shows */
    const char *settings_sql; /* run once per connection, before anything else; NULL: none */
    int nsettings;            /* its text parameters: settings[0..nsettings) */
    const char *settings[PGSESS_SETTINGS_MAX];
    const struct pgsess_stmt *stmts; /* the statements pgtrip_params runs by name */
    size_t nstmts;
    /* How a failure to connect is said: NULL when the caller says it.
     * Otherwise once while it lasts, under the key "<who>: postgres" (which
     * the caller's own PostgreSQL failures may share, so that one outage is
     * one line), as "<who>: postgres unreachable: <why>; <meanwhile>". */
    struct log_repeat *say;
    const char *who;       /* "payments" */
    const char *meanwhile; /* "payments wait" */
    /* When another part of the program says why already (the same
     * password, the same certificate), the line gives these words instead
     * of the reason ("the workers' log says why"), and the reason goes to
     * the debug level: one reason said twice would read as two problems. */
    const char *why_elsewhere;
};

struct pgsess {
    const struct cfg *cfg;
    struct pgsess_conf conf;
    char settings[PGSESS_SETTINGS_MAX][32]; /* copies of conf.settings */
    PGconn *pg;                             /* NULL while not connected */
};

/* Ready s to connect as the program's role (cfg_role_self) with conf, on its
 * first use; nothing is connected yet. conf is copied, and the settings'
 * texts too (each at most 31 bytes). */
void pgsess_init(struct pgsess *s, const struct cfg *c, const struct pgsess_conf *conf);
/* Connect unless connected (a new connection takes the password the
 * configuration holds now). 0 when connected; -1 with why in err (and said,
 * when conf.say). */
int pgsess_ready(struct pgsess *s, char *err, size_t errlen);
/* The statement of conf.stmts called name, or NULL. */
const struct pgsess_stmt *pgsess_stmt(const struct pgsess *s, const char *name);
/* Close the connection (the server rolls back what it held); the next
 * pgsess_ready connects again. */
void pgsess_drop(struct pgsess *s);
/* pgsess_drop; s may be initialised again. */
void pgsess_close(struct pgsess *s);

/* libpq's message (a result's, or the connection's when res is NULL) on one
 * line after "what: ", into err: a log line must not span lines. */
void pgsess_error(char *err, size_t errlen, const char *what, PGconn *pg, const PGresult *res);

#endif
