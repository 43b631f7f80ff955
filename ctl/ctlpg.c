#include "ctlpg.h"

#include <stdio.h>
#include <stdlib.h>

#include "embed.h"
#include "pgconn.h"
#include "util.h"

PGconn *ctlpg_open(const struct cfg *c)
{
    char err[512];
    PGconn *pg = NULL;
    if (pgconn_open(c, "seckillctl", &pg, err, sizeof(err)) != 0) {
        fprintf(stderr, "seckillctl: %s\n", err);
        return NULL;
    }
    return pg;
}

PGresult *ctlpg_exec(PGconn *pg, const char *sql, int n, const char *const *params, ExecStatusType want,
                     const char *what)
{
    PGresult *res = PQexecParams(pg, sql, n, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) == want)
        return res;
    fprintf(stderr, "seckillctl: %s: %s", what, PQerrorMessage(pg));
    PQclear(res);
    return NULL;
}

int ctlpg_cmd(PGconn *pg, const char *sql, const char *what)
{
    PGresult *res = ctlpg_exec(pg, sql, 0, NULL, PGRES_COMMAND_OK, what);
    PQclear(res);
    return res ? 0 : -1;
}

int ctlpg_item_ids(PGconn *pg, int64_t **ids, size_t *n)
{
    PGresult *res = ctlpg_exec(pg, embed_recon_items, 0, NULL, PGRES_TUPLES_OK, "list items");
    int ret = -1;
    if (!res)
        return -1;
    int rows = PQntuples(res);
    *n = (size_t)rows;
    if (!(*ids = malloc((size_t)(rows ? rows : 1) * sizeof(**ids)))) {
        fprintf(stderr, "seckillctl: out of memory\n");
        goto fail;
    }
    for (int i = 0; i < rows; i++)
        (*ids)[i] = ctlpg_i64(res, i, 0);
    ret = 0;
fail:
    PQclear(res);
    return ret;
}

int64_t ctlpg_i64(const PGresult *res, int row, int col)
{
    int64_t v;
    if (PQgetisnull(res, row, col) ||
        util_parse_i64(PQgetvalue(res, row, col), INT64_MIN, INT64_MAX, &v) != 0)
        return -1;
    return v;
}
