#include "deadline.h"

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bgthread.h"
#include "cmetrics.h"
#include "embed.h"
#include "log.h"
#include "outbox.h"
#include "pgtrip.h"
#include "util.h"

/* After a failed pass (a service down) the thread waits this long, doubling
 * to the cap: the connections are remade on the next pass. */
#define DL_BACKOFF_BASE_MS 100
#define DL_BACKOFF_CAP_MS 5000

struct deadline {
    const struct cfg *cfg;
    struct bgthread t;
    struct pgsess pg;
    struct pgtrip trip;
    /* The session's statements: the pass's, then the outbox's. */
    struct pgsess_stmt stmts[1 + OB_NSTMTS];
    struct outbox ob;
    struct log_repeat say_pg;
    int fails; /* failed passes in a row: the backoff's exponent */
};

/* Expire the orders of up to limit windows that ended (cons_expire.sql):
 * one statement, so their status, stock_left and return rows commit
 * together. Its rows are the returns to send now, the outbox's batch; its
 * last column, how many windows it took (paid or cancelled orders' windows
 * are taken without an expiry). 0 and *taken, or -1. */
static int expire_due(struct deadline *d, int limit, int64_t *taken)
{
    char lim[16], first[16];
    int n = 0;
    snprintf(lim, sizeof(lim), "%d", limit);
    snprintf(first, sizeof(first), "%d", DL_FIRST_TRY_MS);
    const struct pgparam p[] = { { .text = lim }, { .text = first } };
    *taken = 0;
    if (ob_room(&d->ob, (size_t)limit) != 0)
        return -1;
    int at = pgtrip_params(&d->trip, "expire", p, 2, PGRES_TUPLES_OK);
    if (pgtrip_run_said(&d->trip, &d->say_pg, "expiry", "expiring orders") != PGT_OK)
        return -1;
    PGresult *res = pgtrip_result(&d->trip, at);
    if (PQntuples(res) > 0 && util_parse_i64(PQgetvalue(res, 0, 5), 0, INT64_MAX, taken) != 0)
        log_warn("expiry: the count of windows taken is not a number: '%s'", PQgetvalue(res, 0, 5));
    for (int i = 0; i < PQntuples(res); i++)
        n += !PQgetisnull(res, i, 0); /* none expired: one row carries the count alone */
    ob_take(&d->ob, res);
    pgtrip_reset(&d->trip);
    if (n > 0) {
        CM_ADD(expired, n);
        log_debug("expiry: %d orders not paid in time expired; their units go back on sale", n);
    }
    return 0;
}

/* Expire what is due and give those units back, then the returns due for
 * a retry. 0 and *more (a full batch: go on at once), or -1 (PostgreSQL
 * failed). */
static int pass(struct deadline *d, bool *more)
{
    int limit = CFG_GET(d->cfg->consumer.expire_batch);
    int64_t taken = 0;
    char err[512];
    *more = false;
    if (pgsess_ready(&d->pg, err, sizeof(err)) != 0 || expire_due(d, limit, &taken) != 0 ||
        ob_send(&d->ob) != 0)
        return -1;
    if (ob_retry(&d->ob, limit) != 0 || ob_count(&d->ob) != 0)
        return -1;
    log_repeat_end(&d->say_pg, "a pass done");
    *more = taken >= limit || ob_size(&d->ob) == (size_t)limit;
    return 0;
}

static void *run(void *arg)
{
    struct deadline *d = arg;
    while (!bgt_stopping(&d->t)) {
        bool more = false;
        int64_t wait_ms = CFG_GET(d->cfg->consumer.expire_interval_ms);
        if (pass(d, &more) != 0) {
            /* jittered (consumers side by side lost the same server), never
             * sooner than the base */
            wait_ms = util_max_i64(DL_BACKOFF_BASE_MS,
                                   util_backoff_ms(d->fails++, DL_BACKOFF_BASE_MS, DL_BACKOFF_CAP_MS));
        } else {
            d->fails = 0;
            if (more)
                continue;
        }
        bgt_sleep_ms(&d->t, wait_ms);
    }
    return NULL;
}

int dl_start(const struct cfg *c, struct deadline **out, char *err, size_t errlen)
{
    struct deadline *d = calloc(1, sizeof(*d));
    if (!d) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    /* Each planned for the values it is given (plan_each_run), as it always
     * was: a pass runs it once. */
    d->stmts[0] = (struct pgsess_stmt){ "expire", embed_cons_expire, 2, true };
    memcpy(d->stmts + 1, ob_stmts, sizeof(ob_stmts));
    /* Why PostgreSQL cannot be reached (a password, a certificate) is the
     * workers' to say, once: their connections fail the same way. */
    struct pgsess_conf pc = { .appname = "seckill-consumer-expiry", .stmts = d->stmts,
                              .nstmts = ARRAY_SIZE(d->stmts), .say = &d->say_pg, .who = "expiry",
                              .meanwhile = "orders past their payment window wait",
                              .why_elsewhere = "the workers' log says why" };
    pgsess_init(&d->pg, c, &pc);
    pgtrip_init(&d->trip, &d->pg);
    d->cfg = c;
    ob_init(&d->ob, c, &d->trip, &d->say_pg);
    if (bgt_start(&d->t, run, d) != 0) {
        snprintf(err, errlen, "expiry: cannot start its thread");
        free(d);
        return -1;
    }
    *out = d;
    return 0;
}

void dl_stop(struct deadline *d)
{
    if (!d)
        return;
    bgt_stop(&d->t);
    pgtrip_free(&d->trip);
    pgsess_close(&d->pg);
    ob_free(&d->ob);
    free(d);
}
