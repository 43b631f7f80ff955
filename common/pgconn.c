#include "pgconn.h"

#include <stdio.h>
#include <string.h>

#include "log.h"

static void notice_to_log(void *arg, const char *message)
{
    (void)arg;
    size_t n = strlen(message);
    log_notice("postgres: %.*s", (int)(n && message[n - 1] == '\n' ? n - 1 : n), message);
}

int pgconn_open(const struct cfg *c, const char *application_name, PGconn **out, char *err, size_t errlen)
{
    char timeout[16];
    snprintf(timeout, sizeof(timeout), "%d", c->postgres.connect_timeout_s);
    /* host and port may be lists: libpq tries each host in turn and, with
     * target_session_attrs=read-write, keeps the first that accepts writes,
     * which is how every program follows a promoted standby. connect_timeout
     * applies per host. */
    const char *keys[] = { "host", "port", "dbname", "user", "password", "connect_timeout", "sslmode",
                           "target_session_attrs", "application_name", NULL };
    /* An empty value (no password configured) means libpq's default. */
    const char *vals[] = { c->postgres.host, c->postgres.port, c->postgres.dbname, c->postgres.user,
                           c->postgres.password, timeout, c->postgres.sslmode, c->postgres.target_session_attrs,
                           application_name, NULL };
    PGconn *pg = PQconnectdbParams(keys, vals, 0);
    if (pg == NULL) {
        snprintf(err, errlen, "postgres: out of memory");
        return -1;
    }
    if (PQstatus(pg) != CONNECTION_OK) {
        const char *m = PQerrorMessage(pg);
        size_t n = strlen(m);
        snprintf(err, errlen, "postgres %s:%s: %.*s", c->postgres.host, c->postgres.port,
                 (int)(n && m[n - 1] == '\n' ? n - 1 : n), m);
        PQfinish(pg);
        return -1;
    }
    PQsetNoticeProcessor(pg, notice_to_log, NULL);
    *out = pg;
    return 0;
}
