#include "pgsess.h"

#include <stdio.h>
#include <string.h>

#include "pgconn.h"

void pgsess_error(char *err, size_t errlen, const char *what, PGconn *pg, const PGresult *res)
{
    const char *m = res ? PQresultErrorMessage(res) : "";
    if (!m[0])
        m = pg ? PQerrorMessage(pg) : "no connection";
    size_t n = strlen(m);
    while (n && (m[n - 1] == '\n' || m[n - 1] == ' '))
        n--;
    snprintf(err, errlen, "%s: %.*s", what, (int)n, m);
    /* libpq's messages span lines; a log line must not */
    for (char *c = err; *c; c++)
        if (*c == '\n' || *c == '\t')
            *c = ' ';
}

void pgsess_init(struct pgsess *s, const struct cfg *c, const struct pgsess_conf *conf)
{
    memset(s, 0, sizeof(*s));
    s->cfg = c;
    s->conf = *conf;
    if (s->conf.nsettings > PGSESS_SETTINGS_MAX)
        s->conf.nsettings = PGSESS_SETTINGS_MAX;
    for (int i = 0; i < s->conf.nsettings; i++) {
        snprintf(s->settings[i], sizeof(s->settings[i]), "%s", conf->settings[i]);
        s->conf.settings[i] = s->settings[i];
    }
}

const struct pgsess_stmt *pgsess_stmt(const struct pgsess *s, const char *name)
{
    for (size_t i = 0; i < s->conf.nstmts; i++)
        if (strcmp(s->conf.stmts[i].name, name) == 0)
            return &s->conf.stmts[i];
    return NULL;
}

void pgsess_drop(struct pgsess *s)
{
    if (s->pg)
        PQfinish(s->pg);
    s->pg = NULL;
}

void pgsess_close(struct pgsess *s)
{
    pgsess_drop(s);
}

/* The settings statement, the statements prepared, pipeline mode: on a new
 * connection, before its first trip. 0, or -1 with err. */
static int set_up(struct pgsess *s, char *err, size_t errlen)
{
    const struct pgsess_conf *c = &s->conf;
    PGresult *r;
    if (c->settings_sql) {
        r = PQexecParams(s->pg, c->settings_sql, c->nsettings, NULL, c->settings, NULL, NULL, 0);
        bool ok = PQresultStatus(r) == PGRES_TUPLES_OK || PQresultStatus(r) == PGRES_COMMAND_OK;
        if (!ok)
            pgsess_error(err, errlen, "session settings", s->pg, r);
        PQclear(r);
        if (!ok)
            return -1;
    }
    for (size_t i = 0; i < c->nstmts; i++) {
        if (c->stmts[i].plan_each_run)
            continue;
        r = PQprepare(s->pg, c->stmts[i].name, c->stmts[i].sql, c->stmts[i].nparams, NULL);
        bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
        if (!ok)
            pgsess_error(err, errlen, c->stmts[i].name, s->pg, r);
        PQclear(r);
        if (!ok)
            return -1;
    }
    if (!PQenterPipelineMode(s->pg)) {
        pgsess_error(err, errlen, "pipeline mode", s->pg, NULL);
        return -1;
    }
    return 0;
}

int pgsess_ready(struct pgsess *s, char *err, size_t errlen)
{
    char key[LOG_REPEAT_KEY_MAX];
    if (s->pg && PQstatus(s->pg) == CONNECTION_OK)
        return 0;
    pgsess_drop(s);
    if (pgconn_open(s->cfg, s->conf.appname, &s->pg, err, errlen) == 0 && set_up(s, err, errlen) == 0)
        return 0;
    pgsess_drop(s);
    if (!s->conf.say)
        return -1;
    snprintf(key, sizeof(key), "%s: postgres", s->conf.who);
    if (s->conf.why_elsewhere) {
        log_debug("%s: postgres: %s", s->conf.who, err);
        log_repeat(s->conf.say, LOG_LVL_WARNING, key,
                   "%s: postgres unreachable (%s); %s (logged once while it lasts)", s->conf.who,
                   s->conf.why_elsewhere, s->conf.meanwhile);
    } else {
        log_repeat(s->conf.say, LOG_LVL_WARNING, key,
                   "%s: postgres unreachable: %s; %s (logged once while it lasts)", s->conf.who, err,
                   s->conf.meanwhile);
    }
    return -1;
}
