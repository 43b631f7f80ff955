#include "inspect.h"

#include <getopt.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctlpg.h"
#include "embed.h"
#include "kmeta.h"
#include "util.h"

#define NUMERIC_OID 1700
#define INT8_OID 20
#define INT4_OID 23
/* The deadline of each question about the dead-letter topic. A broker that
 * does not answer in time makes the count "unknown" (exit status 1) rather
 * than holding up the report. */
#define DLQ_TIMEOUT_MS 5000

struct section {
    const char *title;
    const char *sql;
    bool must_be_empty;
};

static bool numeric(Oid t)
{
    return t == INT8_OID || t == INT4_OID || t == NUMERIC_OID;
}

/* An aligned table, numbers to the right, like psql's. */
static void print_table(const PGresult *res)
{
    int rows = PQntuples(res), cols = PQnfields(res);
    size_t *w = calloc((size_t)cols + 1, sizeof(*w));
    if (!w)
        return;
    for (int j = 0; j < cols; j++) {
        w[j] = strlen(PQfname(res, j));
        for (int i = 0; i < rows; i++)
            if ((size_t)PQgetlength(res, i, j) > w[j])
                w[j] = (size_t)PQgetlength(res, i, j);
    }
    for (int j = 0; j < cols; j++)
        printf("%s%*s", j ? "  " : "  ", numeric(PQftype(res, j)) ? (int)w[j] : -(int)w[j], PQfname(res, j));
    printf("\n");
    for (int i = 0; i < rows; i++) {
        for (int j = 0; j < cols; j++)
            printf("  %*s", numeric(PQftype(res, j)) ? (int)w[j] : -(int)w[j], PQgetvalue(res, i, j));
        printf("\n");
    }
    if (rows == 0)
        printf("  (none)\n");
    free(w);
}

/* Dead letters on kafka.dlq_topic: every message still retained there. */
static int dead_letters(const struct cfg *c, int64_t *out, char *err, size_t errlen)
{
    int64_t *lo = NULL, *hi = NULL;
    int ret = -1;
    rd_kafka_t *rk = kmeta_open(c, NULL, err, errlen);
    if (!rk)
        return -1;
    int32_t n;
    if (kmeta_partitions(rk, c->kafka.dlq_topic, DLQ_TIMEOUT_MS, &n, err, errlen) != 0)
        goto fail;
    if (!(lo = calloc((size_t)n, sizeof(*lo))) || !(hi = calloc((size_t)n, sizeof(*hi)))) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (kmeta_range(rk, c->kafka.dlq_topic, n, DLQ_TIMEOUT_MS, lo, hi, err, errlen) != 0)
        goto fail;
    *out = 0;
    for (int32_t i = 0; i < n; i++)
        *out += hi[i] - lo[i];
    ret = 0;
fail:
    free(lo);
    free(hi);
    rd_kafka_destroy(rk);
    return ret;
}

/* Late payments per item (insp_late.sql), when the table exists: a
 * database migrated before 009 has none to show, and says so. 0, or -1 when
 * a query failed. */
static int late_payments(PGconn *pg, const char *const *params)
{
    const char *title = "late payments: the order no longer waited for one (each a refund)";
    PGresult *res = ctlpg_exec(pg, embed_late_exists, 0, NULL, PGRES_TUPLES_OK, title);
    printf("== %s\n", title);
    if (!res)
        return -1;
    bool exists = PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    if (!exists) {
        printf("  (none: the database has no late_payments table, migration 009)\n");
        return 0;
    }
    if (!(res = ctlpg_exec(pg, embed_insp_late, 1, params, PGRES_TUPLES_OK, title)))
        return -1;
    print_table(res);
    PQclear(res);
    return 0;
}

int inspect_cmd(const struct cfg *c, int argc, char **argv)
{
    static const struct option opts[] = {
        { "item", required_argument, NULL, 'i' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const struct section sections[] = {
        { "sold vs stock per item", embed_insp_sold, false },
        { "orders after the sale per item (pending payment, paid, expired, cancelled; units returned)",
          embed_insp_states, false },
        { "items whose stock_left disagrees with their orders (must be none)", embed_insp_mismatch, true },
        { "users with more than one order for an item (must be none)", embed_insp_multi, true },
        { "orders per minute (latest 20)", embed_insp_rate, false },
        { "reservation-to-persist latency", embed_insp_latency, false },
        { "orders the consumer refused, by reason (alert on any)", embed_insp_rejections, false },
    };
    char sid[24], err[512];
    const char *params[] = { NULL };
    int64_t item = 0, dead;
    int o, ret = 0;
    PGconn *pg;

    optind = 1;
    while ((o = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        if (o == 'i' && util_parse_i64(optarg, 1, INT64_MAX, &item) == 0)
            continue;
        fputs("usage: seckillctl [-c FILE] inspect [--item ID]\n", o == 'h' ? stdout : stderr);
        return o == 'h' ? 0 : 2;
    }
    if (optind != argc) {
        fputs("usage: seckillctl [-c FILE] inspect [--item ID]\n", stderr);
        return 2;
    }
    if (item) {
        snprintf(sid, sizeof(sid), "%" PRId64, item);
        params[0] = sid;
    }
    if (!(pg = ctlpg_open(c)))
        return 1;
    for (size_t i = 0; i < ARRAY_SIZE(sections); i++) {
        PGresult *res = ctlpg_exec(pg, sections[i].sql, 1, params, PGRES_TUPLES_OK, sections[i].title);
        printf("== %s\n", sections[i].title);
        if (!res) {
            ret = 1;
            continue;
        }
        print_table(res);
        if (sections[i].must_be_empty && PQntuples(res) > 0)
            ret = 1;
        PQclear(res);
    }
    if (late_payments(pg, params) != 0)
        ret = 1;
    PQfinish(pg);
    printf("== dead letters on %s (all items)\n", c->kafka.dlq_topic);
    if (dead_letters(c, &dead, err, sizeof(err)) == 0) {
        printf("  %" PRId64 "\n", dead);
    } else {
        printf("  unknown: %s\n", err);
        ret = 1;
    }
    return ret;
}
