#include "kconf.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "secret.h"

static pthread_mutex_t tracked_mu = PTHREAD_MUTEX_INITIALIZER;
static rd_kafka_t *tracked[KCONF_TRACKED];

static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk;
    /* librdkafka levels are syslog levels; ours are too. */
    if (level < LOG_LVL_ERROR)
        level = LOG_LVL_ERROR;
    if (level > LOG_LVL_DEBUG)
        level = LOG_LVL_DEBUG;
    /* A connection that failed (refused, reset, a handshake): librdkafka
     * says so at every attempt; the clients' error callbacks say it once
     * per state change, so its own lines are for debugging. */
    if (strcmp(fac, "FAIL") == 0)
        level = LOG_LVL_DEBUG;
    if (log_enabled((enum log_level)level))
        log_msg((enum log_level)level, "kafka %s: %s", fac, buf);
}

int kconf_set(rd_kafka_conf_t *conf, const char *name, const char *value, char *err, size_t errlen)
{
    char kerr[256];
    if (rd_kafka_conf_set(conf, name, value, kerr, sizeof(kerr)) != RD_KAFKA_CONF_OK) {
        snprintf(err, errlen, "kafka property %s: %s", name, kerr);
        return -1;
    }
    return 0;
}

/* This program's SASL user and password, from a private copy of the secret
 * wiped right after librdkafka took its own. */
static int set_credentials(rd_kafka_conf_t *conf, const struct cfg *c, char *err, size_t errlen)
{
    enum cfg_role r = cfg_role_self();
    struct secret *pw = c->kafka.password[r] ? secret_dup(c->kafka.password[r]) : NULL;
    int ret = -1;
    if (!pw) {
        snprintf(err, errlen, "kafka: no password for user %s (kafka.%s_password_file)", c->kafka.user[r],
                 cfg_role_name(r));
        goto fail;
    }
    if (kconf_set(conf, "sasl.mechanisms", c->kafka.sasl_mechanism, err, errlen) != 0 ||
        kconf_set(conf, "sasl.username", c->kafka.user[r], err, errlen) != 0)
        goto fail;
    /* (librdkafka's message for a bad value never echoes it) */
    if (kconf_set(conf, "sasl.password", secret_str(pw), err, errlen) != 0)
        goto fail;
    ret = 0;
fail:
    secret_free(pw);
    return ret;
}

rd_kafka_conf_t *kconf_new(const struct cfg *c, const struct cfg_props *role, const char *const *defaults,
                           char *err, size_t errlen)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    const struct cfg_props *sets[] = { &c->kafka.properties, role };
    if (!conf) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    /* Nagle off, as Kafka's own clients and the broker have it. Over TLS,
     * librdkafka writes a request as more than one record, so a small
     * request's tail waits for the ACK of its head, which the broker delays
     * (40 ms): with 64 orders in flight, 47 ms p99 and a fifth of the
     * throughput on this machine (docs/security.md). */
    if (kconf_set(conf, "socket.nagle.disable", "true", err, errlen) != 0)
        goto fail;
    for (size_t i = 0; defaults && defaults[i]; i += 2)
        if (kconf_set(conf, defaults[i], defaults[i + 1], err, errlen) != 0)
            goto fail;
    if (kconf_set(conf, "security.protocol", c->kafka.security_protocol, err, errlen) != 0)
        goto fail;
    if (cfg_kafka_sasl(c) && set_credentials(conf, c, err, errlen) != 0)
        goto fail;
    if (*c->kafka.ssl_ca_file && kconf_set(conf, "ssl.ca.location", c->kafka.ssl_ca_file, err, errlen) != 0)
        goto fail;
    for (size_t s = 0; s < 2; s++)
        for (size_t i = 0; i < sets[s]->n; i++)
            if (kconf_set(conf, sets[s]->keys[i], sets[s]->values[i], err, errlen) != 0)
                goto fail;
    if (kconf_set(conf, "bootstrap.servers", c->kafka.brokers, err, errlen) != 0)
        goto fail;
    rd_kafka_conf_set_log_cb(conf, log_cb);
    return conf;
fail:
    rd_kafka_conf_destroy(conf);
    return NULL;
}

int kconf_fatal(rd_kafka_t *rk, int err, _Atomic int *fatal)
{
    char why[512];
    if (err != RD_KAFKA_RESP_ERR__FATAL)
        return 0;
    /* The code that made it fatal, not __FATAL itself, names the cause. */
    rd_kafka_resp_err_t orig = rd_kafka_fatal_error(rk, why, sizeof(why));
    log_error("kafka: fatal error %s: %s; shutting down", rd_kafka_err2name(orig), why);
    atomic_store(fatal, 1);
    return 1;
}

void kconf_track(rd_kafka_t *rk)
{
    pthread_mutex_lock(&tracked_mu);
    for (size_t i = 0; i < KCONF_TRACKED; i++)
        if (!tracked[i]) {
            tracked[i] = rk;
            break;
        }
    pthread_mutex_unlock(&tracked_mu);
}

void kconf_untrack(rd_kafka_t *rk)
{
    pthread_mutex_lock(&tracked_mu);
    for (size_t i = 0; i < KCONF_TRACKED; i++)
        if (tracked[i] == rk)
            tracked[i] = NULL;
    pthread_mutex_unlock(&tracked_mu);
}

void kconf_rotate(const struct cfg *c, void *arg)
{
    (void)arg;
    enum cfg_role r = cfg_role_self();
    struct secret *pw;
    if (!cfg_kafka_sasl(c) || !c->kafka.password[r])
        return;
    if (!(pw = secret_dup(c->kafka.password[r]))) {
        log_error("kafka: out of memory; clients keep their SASL password");
        return;
    }
    pthread_mutex_lock(&tracked_mu);
    for (size_t i = 0; i < KCONF_TRACKED; i++) {
        rd_kafka_error_t *e;
        if (!tracked[i])
            continue;
        if ((e = rd_kafka_sasl_set_credentials(tracked[i], c->kafka.user[r], secret_str(pw)))) {
            log_error("kafka: %s: the new SASL password is not in use: %s", rd_kafka_name(tracked[i]),
                      rd_kafka_error_string(e));
            rd_kafka_error_destroy(e);
        }
    }
    pthread_mutex_unlock(&tracked_mu);
    secret_free(pw);
}

int kconf_refused(int err, const char *reason)
{
    if (err == RD_KAFKA_RESP_ERR__AUTHENTICATION || err == RD_KAFKA_RESP_ERR__SSL ||
        err == RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED)
        return 1;
    /* A handshake the broker's side closed under us is _TRANSPORT, not _SSL
     * (librdkafka PR #3378), even when our own check of its certificate is
     * what failed: OpenSSL's reason is the only sign of it. */
    return err == RD_KAFKA_RESP_ERR__TRANSPORT && reason && strstr(reason, "certificate verify failed");
}
