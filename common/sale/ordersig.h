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
 * Keys come from kafka.order_keys, "KID:FILE" entries: the first signs,
 * every one verifies, so a key is rotated by adding the new one to the
 * consumers, then putting it first on the producers, then dropping the old
 * one (docs/security.md). A key file follows secret_read_key's rules and
 * holds at least OSIG_KEY_MIN bytes; KID is [A-Za-z0-9_-]{1,OSIG_KID_MAX}.
 *
 * The process holds one current key set (osig_load, then on SIGHUP through
 * osig_reload_hook): osig_sign and osig_verify may be called from any thread
 * at any time; they hold a lock across the one HMAC, so a reload's commit
 * cannot free the keys under them (it waits for that HMAC, nothing more). The osig_keys_*
 * functions work on a set the caller owns (tests, -t). */
#ifndef SECKILL_ORDERSIG_H
#define SECKILL_ORDERSIG_H

#include <stddef.h>

#include "cfg.h"
#include "daemon.h"
#include "order.h"

#define OSIG_KID_MAX 32
#define OSIG_KEY_MIN 32

enum osig_verdict {
    OSIG_OK,
    OSIG_NONE,        /* the order has no "sig" */
    OSIG_UNKNOWN_KID, /* signed with a key this set does not hold */
    OSIG_BAD,         /* the MAC does not match: forged or altered */
};

struct osig_keys;

/* Load c's kafka.order_keys. An empty list is an error (the producer and the
 * consumer need a key); errors name the setting's place and the entry.
 * 0 and *out (caller frees), or -1 with err set. */
int osig_keys_load(const struct cfg *c, struct osig_keys **out, char *err, size_t errlen);
void osig_keys_free(struct osig_keys *ks);
size_t osig_keys_count(const struct osig_keys *ks);
/* Set o->sig with the set's first key. 0, or -1 (no key). */
int osig_keys_sign(const struct osig_keys *ks, struct order *o);
/* Check o->sig; anything but OSIG_OK puts the reason in err. */
enum osig_verdict osig_keys_verify(const struct osig_keys *ks, const struct order *o, char *err,
                                   size_t errlen);

/* The process's key set. osig_load installs c's keys (replacing any):
 * 0, or -1 with err set and the set as it was. */
int osig_load(const struct cfg *c, char *err, size_t errlen);
/* Free the process's set (at exit). */
void osig_unload(void);
/* osig_keys_sign / osig_keys_verify with the process's set; without one,
 * sign fails and verify says OSIG_UNKNOWN_KID. */
int osig_sign(struct order *o);
enum osig_verdict osig_verify(const struct order *o, char *err, size_t errlen);
/* A reload reads every key file again (a replaced file is the usual reason
 * for a SIGHUP); a bad one refuses the reload and keeps the current set. */
struct daemon_reload_hook osig_reload_hook(void);
/* For -t: c's keys load. 0, or -1 with err set. */
int osig_check(const struct cfg *c, char *err, size_t errlen);

#endif
