/* msgenv: the envelope every message of the sale's topics shares (orders,
 * buyers' cancels, payments), decoded once.
 *
 * A message is a JSON object with no member twice, whose "v" is the
 * version its decoder knows; its "order_id" is a positive 64-bit integer
 * written as a decimal string (a JSON number beyond 2^53 loses digits in
 * many readers); its integers are checked in range; its words (a payment's
 * reference, a signature) are strings of a fixed alphabet; and its Kafka
 * key is its user id in decimal, which keeps a user's orders, cancels and
 * payments on one partition, in order. The decoders (order.c, paymsg.c)
 * keep only what is their message's own. Every error is worded here, once,
 * for the dead letter that carries it. Any thread. */
#ifndef SECKILL_MSGENV_H
#define SECKILL_MSGENV_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* Parse buf as a message of version: 0 and *root (the caller's to
 * json_decref), or -1 with err (bad JSON, not an object, a member twice,
 * "v" missing or another version). */
int msgenv_open(const void *buf, size_t len, int64_t version, json_t **root, char *err, size_t errlen);

/* The integer member name in [min, max] into *out; 0, or -1 with err. */
int msgenv_int(json_t *root, const char *name, int64_t min, int64_t max, int64_t *out, char *err,
               size_t errlen);

/* "order_id", a decimal string of a positive 64-bit integer, into *out;
 * 0, or -1 with err. */
int msgenv_order_id(json_t *root, int64_t *out, char *err, size_t errlen);

/* The string member name of 1 to size - 1 characters of chars into out
 * (NUL-terminated; all of out zeroed first). Missing: 0 with out empty when
 * optional, else -1. what says what it must be, in err. */
int msgenv_word(json_t *root, const char *name, const char *chars, char *out, size_t size, int optional,
                const char *what, char *err, size_t errlen);

/* Whether the Kafka key (key_len bytes; NULL: none) is user_id in decimal:
 * 0, or -1 with err ("no key: WHAT is keyed by its user id", "key is not
 * the user id"); what names the message ("an order", "a payment"). */
int msgenv_key_is_user(const void *key, size_t key_len, int64_t user_id, const char *what, char *err,
                       size_t errlen);

#endif
