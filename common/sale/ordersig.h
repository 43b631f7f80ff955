/* ordersig: the producers' MAC over each order, so a consumer takes only
 * orders a producer reserved.
 *
 * Anyone who can write the orders topic (a stolen Kafka password) could
 * otherwise publish well-formed orders no producer reserved, and the
 * consumer would let them take stock and order ids from real buyers. Each
 * order therefore carries "sig": "KID:HEX", HMAC-SHA256 (OpenSSL) under a
 * key that producers and consumers hold and Kafka never sees, over the text
 *   "seckill-order-v1\n<order_id>\n<user_id>\n<item_id>\n<qty>\n"
 * (a buyer's cancel, order.h: "seckill-cancel-v1" on the first line)
 * reserved_at_ms is deliberately not covered: seckill_reserve re-stamps it
 * inside the stored message (Redis holds no key); it decides no outcome.
 *
 * Keys come from kafka.order_keys, "KID:FILE" entries, under
 * kafka.order_key_dir: the first signs, every one verifies, so a key is
 * rotated by adding the new one to the consumers, then putting it first on
 * the producers, then dropping the old one (docs/security.md). The list's
 * rules, the key files' and the MAC's are common/base/keyring.h's.
 *
 * The process holds one current key set (osig_load, then on SIGHUP through
 * osig_reload_hook, or a hook of several keyring_live sets: osig_live):
 * osig_sign and osig_verify may be called from any thread at any time
 * (keyring.h says how a reload stays out of their way). The osig_keys_*
 * functions work on a set the caller owns (tests, -t). */
#ifndef SECKILL_ORDERSIG_H
#define SECKILL_ORDERSIG_H

#include <stddef.h>

#include "cfg.h"
#include "daemon.h"
#include "keyring.h"
#include "order.h"

/* Load c's kafka.order_keys. An empty list is an error (the producer and the
 * consumer need a key); errors name the setting's place and the entry.
 * 0 and *out (caller frees), or -1 with err set. */
int osig_keys_load(const struct cfg *c, struct keyring **out, char *err, size_t errlen);
/* Set o->sig with the set's first key. 0, or -1 (no key). */
int osig_keys_sign(const struct keyring *ks, struct order *o);
/* Check o->sig; anything but KEYRING_OK puts the reason in err. */
enum keyring_verdict osig_keys_verify(const struct keyring *ks, const struct order *o, char *err,
                                      size_t errlen);

/* The process's key set. osig_load installs c's keys (replacing any):
 * 0, or -1 with err set and the set as it was. */
int osig_load(const struct cfg *c, char *err, size_t errlen);
/* Free the process's set (at exit). */
void osig_unload(void);
/* osig_keys_sign / osig_keys_verify with the process's set; without one,
 * sign fails and verify says KEYRING_UNKNOWN_KID. */
int osig_sign(struct order *o);
enum keyring_verdict osig_verify(const struct order *o, char *err, size_t errlen);
/* The process's set, for a reload hook of several (keyring_reload_hook). */
struct keyring_live *osig_live(void);
/* A reload reads every key file again (a replaced file is the usual reason
 * for a SIGHUP); a bad one refuses the reload and keeps the current set. */
struct daemon_reload_hook osig_reload_hook(void);
/* For -t: c's keys load. 0, or -1 with err set. */
int osig_check(const struct cfg *c, char *err, size_t errlen);

#endif
