#include "paysig.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>

static const struct keyring_spec spec = {
    .setting = "kafka.payment_keys",
    .list_off = offsetof(struct cfg, kafka.payment_keys),
    .dir_off = offsetof(struct cfg, kafka.payment_key_dir),
    .signer = "a payment key",
    .empty_why = "the payment service signs each payment with one of them and the consumer applies only "
                 "payments one of them signed (docs/security.md)",
    .name = "payment keys",
    .signs = "seckillctl payment sign signs",
};

static struct keyring_live live = KEYRING_LIVE_INIT(&spec);

int psig_text(const struct pay_msg *m, char *buf, size_t len)
{
    int n = snprintf(buf, len, "seckill-payment-v1\n%" PRId64 "\n%" PRId64 "\n%" PRId64 "\n%s\n", m->order_id,
                     m->user_id, m->paid_at_ms, m->ref);
    return n < 0 || (size_t)n >= len ? -1 : n;
}

int psig_keys_load(const struct cfg *c, struct keyring **out, char *err, size_t errlen)
{
    return keyring_load(&spec, c, out, err, errlen);
}

int psig_keys_sign(const struct keyring *ks, struct pay_msg *m)
{
    char text[PSIG_TEXT_MAX];
    int n = psig_text(m, text, sizeof(text));
    return n < 0 ? -1 : keyring_sign(ks, text, (size_t)n, m->sig);
}

/* The verdict on m's MAC, under ks or (ks NULL) the process's set. */
static enum keyring_verdict verify(const struct keyring *ks, const struct pay_msg *m, char *err,
                                   size_t errlen)
{
    char text[PSIG_TEXT_MAX];
    int n = psig_text(m, text, sizeof(text));
    if (n < 0) {
        snprintf(err, errlen, "not signed by a payment key: the payment's text does not fit");
        return KEYRING_BAD;
    }
    return ks ? keyring_verify(ks, text, (size_t)n, m->sig, err, errlen)
              : keyring_live_verify(&live, text, (size_t)n, m->sig, err, errlen);
}

enum keyring_verdict psig_keys_verify(const struct keyring *ks, const struct pay_msg *m, char *err,
                                      size_t errlen)
{
    if (!ks) {
        snprintf(err, errlen, "not signed by a payment key: no key loaded");
        return KEYRING_UNKNOWN_KID;
    }
    return verify(ks, m, err, errlen);
}

int psig_load(const struct cfg *c, char *err, size_t errlen)
{
    return keyring_live_load(&live, c, err, errlen);
}

void psig_unload(void)
{
    keyring_live_unload(&live);
}

int psig_sign(struct pay_msg *m)
{
    char text[PSIG_TEXT_MAX];
    int n = psig_text(m, text, sizeof(text));
    return n < 0 ? -1 : keyring_live_sign(&live, text, (size_t)n, m->sig);
}

enum keyring_verdict psig_verify(const struct pay_msg *m, char *err, size_t errlen)
{
    return verify(NULL, m, err, errlen);
}

struct keyring_live *psig_live(void)
{
    return &live;
}

int psig_check(const struct cfg *c, char *err, size_t errlen)
{
    return keyring_check(&spec, c, err, errlen);
}
