/* kconf: librdkafka configuration, the same way for every client (the
 * producer's, the consumer's and its dead-letter producer), and the one way
 * every client takes a fatal error. */
#ifndef SECKILL_KCONF_H
#define SECKILL_KCONF_H

#include <librdkafka/rdkafka.h>
#include <stdatomic.h>
#include <stddef.h>

#include "cfg.h"

/* A conf with our defaults (Nagle off, then the caller's), then the
 * security settings (kafka.security_protocol; with sasl_*, this program's
 * kafka.<role>_user and password; with TLS, kafka.ssl_ca_file), then the
 * configured properties (common, then role-specific, which may override all
 * of these), bootstrap servers, and librdkafka's log lines routed through
 * log.h. NULL with err on failure. */
rd_kafka_conf_t *kconf_new(const struct cfg *c, const struct cfg_props *role, const char *const *defaults,
                           char *err, size_t errlen);
/* A password rotated in its file reaches a running client (SIGHUP) this way:
 * a client made from kconf_new is tracked from creation (kconf_track) until
 * just before it is destroyed (kconf_untrack), and kconf_rotate, after a
 * reload applied, hands every tracked client this program's current SASL
 * user and password (rd_kafka_sasl_set_credentials). librdkafka uses them for
 * the connections it makes from then on; the brokers keep the ones already
 * authenticated, which drain as they break or close. At most KCONF_TRACKED
 * clients per process; thread-safe. */
#define KCONF_TRACKED 16
void kconf_track(rd_kafka_t *rk);
void kconf_untrack(rd_kafka_t *rk);
/* arg is unused: the shape of a daemon_on_reload function (daemon.h), which
 * is how the daemons call it. */
void kconf_rotate(const struct cfg *c, void *arg);

/* err (with the error callback's reason) is what a broker's refusal of
 * this client looks like (SASL authentication, TLS handshake or
 * certificate): a state worth one log line and a "down" gauge, not a
 * transient librdkafka rides out. */
int kconf_refused(int err, const char *reason);

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
