/* paysig: the payment service's MAC over each payment, so a consumer
 * applies only payments the payment service made (issue #55).
 *
 * Anyone who can write the payments topic (the payment user's Kafka
 * password, or the admin's) could otherwise mark a buyer's pending order
 * paid without paying (a buyer knows its own order id and user from the
 * 202), or write any number of late_payments rows "kept for a refund".
 * Payment providers sign what they send (a webhook secret); so does the
 * shop's payment service: each payment carries "sig": "KID:HEX",
 * HMAC-SHA256 (OpenSSL) under a key the payment service and the consumers
 * hold and Kafka never sees, over the text
 *   "seckill-payment-v1\n<order_id>\n<user_id>\n<paid_at_ms>\n<ref>\n"
 * (the message's values, in that order, each line ended by "\n"; the ids
 * and the time in decimal, as the JSON has them).
 *
 * Keys come from kafka.payment_keys, "KID:FILE" entries, under
 * kafka.payment_key_dir: the first signs (seckillctl payment sign), every
 * one verifies (the consumer), so a key is rotated by adding the new one to
 * the consumers, then signing with it, then dropping the old one
 * (docs/security.md). The list's rules, the key files' and the MAC's are
 * common/base/keyring.h's.
 *
 * The process holds one current key set (psig_load, then on SIGHUP through
 * a keyring_reload_hook of psig_live): psig_sign and psig_verify may be
 * called from any thread at any time. The psig_keys_* functions work on a
 * set the caller owns (tests, -t, seckillctl). */
#ifndef SECKILL_PAYSIG_H
#define SECKILL_PAYSIG_H

#include <stddef.h>

#include "cfg.h"
#include "keyring.h"
#include "paymsg.h"

/* The longest text a payment's MAC covers: the first line, two ids and a
 * time of at most 20 characters each, a reference, five newlines. */
#define PSIG_TEXT_MAX (sizeof("seckill-payment-v1") + 3 * 20 + PAY_REF_MAX + 5)

/* The text m's MAC covers into buf: its length, or -1 when it does not fit. */
int psig_text(const struct pay_msg *m, char *buf, size_t len);

/* Load c's kafka.payment_keys (empty is an error). 0 and *out (caller
 * frees), or -1 with err. */
int psig_keys_load(const struct cfg *c, struct keyring **out, char *err, size_t errlen);
/* Set m->sig with the set's first key. 0, or -1 (no key). */
int psig_keys_sign(const struct keyring *ks, struct pay_msg *m);
/* Check m->sig; anything but KEYRING_OK puts the reason in err. */
enum keyring_verdict psig_keys_verify(const struct keyring *ks, const struct pay_msg *m, char *err,
                                      size_t errlen);

/* The process's key set: psig_load installs c's keys (replacing any): 0, or
 * -1 with err and the set as it was. */
int psig_load(const struct cfg *c, char *err, size_t errlen);
void psig_unload(void);
/* psig_keys_sign / psig_keys_verify with the process's set; without one,
 * sign fails and verify says KEYRING_UNKNOWN_KID. */
int psig_sign(struct pay_msg *m);
enum keyring_verdict psig_verify(const struct pay_msg *m, char *err, size_t errlen);
/* The process's set, for a reload hook (keyring_reload_hook). */
struct keyring_live *psig_live(void);
/* For -t: c's keys load. 0, or -1 with err. */
int psig_check(const struct cfg *c, char *err, size_t errlen);

#endif
