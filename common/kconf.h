/* kconf: librdkafka configuration, the same way for every client (the
 * producer's, the consumer's and its dead-letter producer). */
#ifndef SECKILL_KCONF_H
#define SECKILL_KCONF_H

#include <librdkafka/rdkafka.h>
#include <stddef.h>

#include "cfg.h"

/* A conf with our defaults, then the configured properties (common, then
 * role-specific, which may override the defaults), bootstrap servers, and
 * librdkafka's log lines routed through log.h. NULL with err on failure. */
rd_kafka_conf_t *kconf_new(const struct cfg *c, const struct cfg_props *role, const char *const *defaults,
                           char *err, size_t errlen);
/* Set one property; 0 or -1 with err. */
int kconf_set(rd_kafka_conf_t *conf, const char *name, const char *value, char *err, size_t errlen);

#endif
