/* kconf: librdkafka configuration, the same way for every client (the
 * producer's, the consumer's and its dead-letter producer), and the one way
 * every client takes a fatal error. */
#ifndef SECKILL_KCONF_H
#define SECKILL_KCONF_H

#include <librdkafka/rdkafka.h>
#include <stdatomic.h>
#include <stddef.h>

#include "cfg.h"

/* A conf with our defaults, then the configured properties (common, then
 * role-specific, which may override the defaults), bootstrap servers, and
 * librdkafka's log lines routed through log.h. NULL with err on failure. */
rd_kafka_conf_t *kconf_new(const struct cfg *c, const struct cfg_props *role, const char *const *defaults,
                           char *err, size_t errlen);
/* Set one property; 0 or -1 with err. */
int kconf_set(rd_kafka_conf_t *conf, const char *name, const char *value, char *err, size_t errlen);

/* err as an error callback or a consumed message reports it: when it is
 * RD_KAFKA_RESP_ERR__FATAL the client can no longer go on (an idempotent
 * producer lost its sequence, a static member was fenced), so log
 * librdkafka's reason, set *fatal for the owner to stop on (the service
 * manager starts a fresh process) and return 1. Any other err: 0, nothing
 * done; librdkafka retries those, and each caller reports them its own way.
 * Safe on librdkafka's threads. */
int kconf_fatal(rd_kafka_t *rk, int err, _Atomic int *fatal);

#endif
