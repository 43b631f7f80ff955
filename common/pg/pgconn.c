#include "pgconn.h"

#include <stdio.h>
#include <string.h>

#include "log.h"
#include "secret.h"

static void notice_to_log(void *arg, const char *message)
{
    (void)arg;
    size_t n = strlen(message);
    log_notice("postgres: %.*s", (int)(n && message[n - 1] == '\n' ? n - 1 : n), message);
}

int pgconn_open(const struct cfg *c, const char *application_name, PGconn **out, char *err, size_t errlen)
{
    return pgconn_open_as(c, cfg_role_self(), application_name, out, err, errlen);
}

int pgconn_open_as(const struct cfg *c, enum cfg_role role, const char *application_name, PGconn **out,
                   char *err, size_t errlen)
{
    char timeout[16];
    struct secret *pw = NULL;
    PGconn *pg = NULL;
    snprintf(timeout, sizeof(timeout), "%d", c->postgres.connect_timeout_s);
    /* A private copy in a page of its own (out of core dumps), wiped once
     * libpq has taken it: a reload may replace the shared one meanwhile. */
    if (c->postgres.password[role] && !(pw = secret_dup(c->postgres.password[role]))) {
        snprintf(err, errlen, "postgres: out of memory");
        return -1;
    }
    /* host and port may be lists: libpq tries each host in turn and, with
     * target_session_attrs=read-write, keeps the first that accepts writes,
     * which is how every program follows a promoted standby. connect_timeout
     * applies per host. */
    const char *keys[] = { "host", "port", "dbname", "user", "password", "connect_timeout", "sslmode",
                           "sslrootcert", "target_session_attrs", "application_name", NULL };
    /* An empty value (no password configured) means libpq's default. */
    const char *vals[] = { c->postgres.host, c->postgres.port, c->postgres.dbname, c->postgres.user[role],
                           pw ? secret_str(pw) : "", timeout, c->postgres.sslmode, c->postgres.sslrootcert,
                           c->postgres.target_session_attrs, application_name, NULL };
    pg = PQconnectdbParams(keys, vals, 0);
    secret_free(pw);
    if (pg == NULL) {
        snprintf(err, errlen, "postgres: out of memory");
        return -1;
    }
    if (PQstatus(pg) != CONNECTION_OK) {
        const char *m = PQerrorMessage(pg);
        size_t n = strlen(m);
        snprintf(err, errlen, "postgres %s:%s as %s: %.*s", c->postgres.host, c->postgres.port,
                 c->postgres.user[role], (int)(n && m[n - 1] == '\n' ? n - 1 : n), m);
        PQfinish(pg);
        return -1;
    }
    PQsetNoticeProcessor(pg, notice_to_log, NULL);
    *out = pg;
    return 0;
}
