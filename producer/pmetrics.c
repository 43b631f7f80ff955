#include "pmetrics.h"

#include <string.h>

struct pm pm;

void pm_render(struct mbuf *b)
{
    const char *last = "";
#define PM_RENDER(f, fam, type, labels, help)                                        \
    if (strcmp(last, fam) != 0)                                                       \
        metrics_family(b, fam, type, help);                                           \
    metrics_sample(b, fam, labels, atomic_load_explicit(&pm.f, memory_order_relaxed)); \
    last = fam;
    PM_METRICS(PM_RENDER)
#undef PM_RENDER
    metrics_family(b, "seckill_producer_request_duration_seconds", "histogram",
                   "Time from a request's arrival to its answer");
    metrics_hist_write(b, "seckill_producer_request_duration_seconds", NULL, &pm.latency);
}
