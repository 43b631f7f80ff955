#include "orderid.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "embed.h"
#include "order.h"
#include "pgconn.h"
#include "util.h"

int oid_take_block(const struct cfg *c, int64_t *block, char *err, size_t errlen)
{
    PGconn *pg = NULL;
    PGresult *res = NULL;
    char host[256] = "unknown", pid[16];
    const char *params[2] = { host, pid };
    int ret = -1;

    gethostname(host, sizeof(host) - 1);
    snprintf(pid, sizeof(pid), "%d", (int)getpid());
    if (pgconn_open(c, "seckill-producer", &pg, err, errlen) != 0)
        goto fail;
    res = PQexecParams(pg, embed_id_block_take, 2, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        snprintf(err, errlen, "taking an order id block: %s", PQerrorMessage(pg));
        goto fail;
    }
    if (util_parse_i64(PQgetvalue(res, 0, 0), 1, (INT64_C(1) << (63 - ORDER_ID_SEQ_BITS)) - 1,
                       block) != 0) {
        snprintf(err, errlen, "order id blocks exhausted or invalid: '%s'", PQgetvalue(res, 0, 0));
        goto fail;
    }
    ret = 0;
fail:
    PQclear(res);
    PQfinish(pg);
    return ret;
}

void oid_init(struct oid_gen *g, int64_t block)
{
    g->block = block;
    g->seq = 0;
    atomic_store(&g->shown_block, block);
    atomic_store(&g->spare, 0);
    atomic_store(&g->want_spare, 0);
}

int64_t oid_next(struct oid_gen *g)
{
    const int64_t size = INT64_C(1) << ORDER_ID_SEQ_BITS;
    if (g->seq >= size) {
        int64_t spare = atomic_exchange(&g->spare, 0);
        if (spare == 0) {
            atomic_store(&g->want_spare, 1);
            return -1;
        }
        g->block = spare;
        g->seq = 0;
        atomic_store_explicit(&g->shown_block, spare, memory_order_relaxed);
    }
    /* Half way through: plenty of time for housekeeping to fetch the next. */
    if (g->seq == size / 2)
        atomic_store(&g->want_spare, 1);
    return order_id_make(g->block, g->seq++);
}

int64_t oid_block(struct oid_gen *g)
{
    return atomic_load_explicit(&g->shown_block, memory_order_relaxed);
}

int oid_refill(struct oid_gen *g, const struct cfg *c, char *err, size_t errlen)
{
    int64_t block;
    if (!atomic_load(&g->want_spare) || atomic_load(&g->spare) != 0)
        return 0;
    if (oid_take_block(c, &block, err, errlen) != 0)
        return -1;
    atomic_store(&g->spare, block);
    atomic_store(&g->want_spare, 0);
    return 0;
}
