#include "kconf.h"

#include <stdio.h>

#include "log.h"

static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk;
    /* librdkafka levels are syslog levels; ours are too. */
    if (level < LOG_LVL_ERROR)
        level = LOG_LVL_ERROR;
    if (level > LOG_LVL_DEBUG)
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

rd_kafka_conf_t *kconf_new(const struct cfg *c, const struct cfg_props *role, const char *const *defaults,
                           char *err, size_t errlen)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    const struct cfg_props *sets[] = { &c->kafka.properties, role };
    if (!conf) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    for (size_t i = 0; defaults && defaults[i]; i += 2)
        if (kconf_set(conf, defaults[i], defaults[i + 1], err, errlen) != 0)
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
