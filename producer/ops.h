/* ops: the producer's operator listener, producer.metrics_listen:port
 * (loopback by default), apart from the buyers' port:
 *
 *   GET /metrics   Prometheus text (pmetrics.h)
 *   GET /healthz   Redis and Kafka reachable, as on the buyers' port
 *   (HEAD wherever GET is; anything else 404)
 *
 * Scrapes and probes never compete with buyers for connections, and what
 * the metrics tell (stock, errors, who is refused) is not served to the
 * buyers' network. It runs on its own thread (common/base/httpd.c) and reads only
 * atomics: the metrics and the ingress's health. */
#ifndef SECKILL_OPS_H
#define SECKILL_OPS_H

#include <stddef.h>

#include "cfg.h"
#include "ingress.h"

struct ops;

/* Listen on producer.metrics_listen:metrics_port; g answers /healthz and
 * must outlive it. 0 (*out NULL when metrics_port is 0: off), or -1 with
 * err set (a bad address, the port taken). */
int ops_start(const struct cfg *c, struct ingress *g, struct ops **out, char *err, size_t errlen);
/* Close the listener; before ing_stop. NULL is fine. */
void ops_stop(struct ops *o);

#endif
