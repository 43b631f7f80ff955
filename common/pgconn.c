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
    char port[16], timeout[16];
    snprintf(port, sizeof(port), "%d", c->postgres.port);
    snprintf(timeout, sizeof(timeout), "%d", c->postgres.connect_timeout_s);
    const char *keys[] = { "host", "port", "dbname", "user", "password", "connect_timeout", "sslmode",
                           "application_name", NULL };
    /* An empty value (no password configured) means libpq's default. */
    const char *vals[] = { c->postgres.host, port, c->postgres.dbname, c->postgres.user, c->postgres.password,
                           timeout, c->postgres.sslmode, application_name, NULL };
    PGconn *pg = PQconnectdbParams(keys, vals, 0);
    if (pg == NULL) {
        snprintf(err, errlen, "postgres: out of memory");
        return -1;
    }
    if (PQstatus(pg) != CONNECTION_OK) {
        const char *m = PQerrorMessage(pg);
        size_t n = strlen(m);
        snprintf(err, errlen, "postgres %s:%d: %.*s", c->postgres.host, c->postgres.port,
                 (int)(n && m[n - 1] == '\n' ? n - 1 : n), m);
        PQfinish(pg);
        return -1;
    }
    PQsetNoticeProcessor(pg, notice_to_log, NULL);
    *out = pg;
    return 0;
}
