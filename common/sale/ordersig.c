#include "ordersig.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>

_Static_assert(ORDER_SIG_MAX >= KEYRING_SIG_MAX, "an order holds a keyring MAC");

static const struct keyring_spec spec = {
    .setting = "kafka.order_keys",
    .list_off = offsetof(struct cfg, kafka.order_keys),
    .dir_off = offsetof(struct cfg, kafka.order_key_dir),
    .signer = "a producer key",
    .empty_why = "the producer signs each order with its first key and the consumer takes only orders one of "
                 "them signed (docs/security.md)",
    .name = "order keys",
    .signs = "orders are signed",
};

static struct keyring_live live = KEYRING_LIVE_INIT(&spec);

/* The text an order's MAC covers into buf: its length, or -1. */
static int text_of(const struct order *o, char *buf, size_t len)
{
    /* A cancel's text differs from its order's in its first line: the
     * order's MAC never verifies a cancel of it. */
    int n = snprintf(buf, len, "%s\n%" PRId64 "\n%" PRId64 "\n%" PRId64 "\n%" PRId64 "\n",
                     o->kind == ORDER_CANCEL ? "seckill-cancel-v1" : "seckill-order-v1", o->order_id,
                     o->user_id, o->item_id, o->qty);
    return n < 0 || (size_t)n >= len ? -1 : n;
}

int osig_keys_load(const struct cfg *c, struct keyring **out, char *err, size_t errlen)
{
    return keyring_load(&spec, c, out, err, errlen);
}

int osig_keys_sign(const struct keyring *ks, struct order *o)
{
    char text[128];
    int n = text_of(o, text, sizeof(text));
    return n < 0 ? -1 : keyring_sign(ks, text, (size_t)n, o->sig);
}

enum keyring_verdict osig_keys_verify(const struct keyring *ks, const struct order *o, char *err,
                                      size_t errlen)
{
    char text[128];
    int n = text_of(o, text, sizeof(text));
    if (n < 0) {
        snprintf(err, errlen, "not signed by a producer key: the order's text does not fit");
        return KEYRING_BAD;
    }
    return keyring_verify(ks, text, (size_t)n, o->sig, err, errlen);
}

int osig_load(const struct cfg *c, char *err, size_t errlen)
{
    return keyring_live_load(&live, c, err, errlen);
}

void osig_unload(void)
{
    keyring_live_unload(&live);
}

int osig_sign(struct order *o)
{
    char text[128];
    int n = text_of(o, text, sizeof(text));
    return n < 0 ? -1 : keyring_live_sign(&live, text, (size_t)n, o->sig);
}

enum keyring_verdict osig_verify(const struct order *o, char *err, size_t errlen)
{
    char text[128];
    int n = text_of(o, text, sizeof(text));
    if (n < 0) {
        snprintf(err, errlen, "not signed by a producer key: the order's text does not fit");
        return KEYRING_BAD;
    }
    return keyring_live_verify(&live, text, (size_t)n, o->sig, err, errlen);
}

struct keyring_live *osig_live(void)
{
    return &live;
}

struct daemon_reload_hook osig_reload_hook(void)
{
    static struct keyring_live *const v[] = { &live, NULL };
    return keyring_reload_hook(v);
}

int osig_check(const struct cfg *c, char *err, size_t errlen)
{
    return keyring_check(&spec, c, err, errlen);
}
