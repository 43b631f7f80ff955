#include "pmetrics.h"

#include "rconn.h"

struct pm pm;

void pm_render(struct mbuf *b)
{
    const char *last = "";
    /* rconn counts the moves for every connection of the process */
    atomic_store_explicit(&pm.redis_primary_moves, (int64_t)rconn_primary_moves(), memory_order_relaxed);
#define PM_RENDER(f, fam, type, labels, help) \
    metrics_list_sample(b, &last, fam, type, help, labels, atomic_load_explicit(&pm.f, memory_order_relaxed));
    PM_METRICS(PM_RENDER)
#undef PM_RENDER
    metrics_family(b, "seckill_producer_request_duration_seconds", "histogram",
                   "Time from a request's arrival to its answer");
    metrics_hist_write(b, "seckill_producer_request_duration_seconds", NULL, &pm.latency);
    metrics_family(b, "seckill_producer_accepted_duration_seconds", "histogram",
                   "Time from an accepted buy request's arrival to its 202 "
                   "(reserved, published, acknowledged)");
    metrics_hist_write(b, "seckill_producer_accepted_duration_seconds", NULL, &pm.latency_accepted);
}
