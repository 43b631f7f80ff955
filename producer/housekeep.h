/* housekeep: the producer's slow duties, off the request path, on a thread
 * of their own: health checks for /healthz and the up gauges, fetching the
 * next order id block ahead of need, and the sweeper. */
#ifndef SECKILL_HOUSEKEEP_H
#define SECKILL_HOUSEKEEP_H

#include "cfg.h"
#include "ingress.h"
#include "orderid.h"
#include "publish.h"

struct hk;

int hk_start(const struct cfg *c, struct pub *p, struct oid_gen *gen, struct ing_health *h,
             struct hk **out, char *err, size_t errlen);
/* Stop after the current duty (a sweep pass waits for its reports). */
void hk_stop(struct hk *k);

#endif
