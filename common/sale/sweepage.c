#include "sweepage.h"

#include <stdio.h>
#include <stdlib.h>

#include "kconf.h"
#include "publish.h"

int64_t sweep_min_age_ms(const struct cfg *c)
{
    char tmo[16], err[256];
    size_t tlen = sizeof(tmo);
    const char *defaults[] = { "message.timeout.ms", tmo, NULL };
    int64_t t = PUB_DEFAULT_TIMEOUT_MS;
    rd_kafka_conf_t *conf;
    snprintf(tmo, sizeof(tmo), "%d", PUB_DEFAULT_TIMEOUT_MS);
    /* The same conf pub_open() starts from, so librdkafka itself resolves
     * overrides, aliases and number syntax exactly as the producer will. */
    if (!(conf = kconf_new(c, &c->kafka.producer_properties, defaults, err, sizeof(err))))
        goto fail;
    if (rd_kafka_conf_get(conf, "message.timeout.ms", tmo, &tlen) == RD_KAFKA_CONF_OK)
        t = atoi(tmo);
    rd_kafka_conf_destroy(conf);
fail:
    return 2 * t + 2000;
}

int64_t sweep_age_ms(const struct cfg *c)
{
    int64_t age = CFG_GET(c->producer.sweep_age_ms), floor = sweep_min_age_ms(c);
    return age > floor ? age : floor;
}
