#include "inmsg.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmetrics.h"
#include "msgenv.h"
#include "order.h"
#include "ordersig.h"
#include "util.h"

static int check_key(const rd_kafka_message_t *km, const struct order *o, char *err, size_t errlen)
{
    /* The key routes a user's orders to one partition; a message without a
     * key, or whose key is not its user, could be overtaken by that user's
     * other orders and cancels (a cancel must reach the consumer after its
     * order): refused as the payments' are. */
    if (msgenv_key_is_user(km->key, km->key_len, o->user_id, "an order", err, errlen) != 0)
        return -1;
    if (o->reserved_at_ms > INMSG_RESERVED_AT_MAX_MS) {
        snprintf(err, errlen, "\"reserved_at_ms\" out of range");
        return -1;
    }
    return 0;
}

int inmsg_decode(const rd_kafka_message_t *km, struct cmsg *m, char *err, size_t errlen)
{
    if (order_decode(km->payload, km->len, &m->o, err, errlen) != 0)
        return -1;
    /* Only an order a producer signed may take stock or an order id: a
     * stolen topic password must not void a real buyer's 202. */
    if (osig_verify(&m->o, err, errlen) != KEYRING_OK) {
        CM_ADD(unsigned_orders, 1);
        return -1;
    }
    return check_key(km, &m->o, err, errlen);
}

int inmsg_keep_raw(const rd_kafka_message_t *km, struct cmsg *m, const char *reason)
{
    void *payload = util_memdup(km->payload, km->len);
    void *key = km->key ? util_memdup(km->key, km->key_len) : NULL;
    char *error = strdup(reason);
    if (!payload || (km->key && !key) || !error) {
        free(payload);
        free(key);
        free(error);
        return -1;
    }
    m->payload = payload;
    m->payload_len = km->len;
    m->key = key;
    m->key_len = km->key ? km->key_len : 0;
    m->error = error;
    return 0;
}
