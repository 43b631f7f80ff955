/* paymsg: a payment message, as the shop's payment service publishes it on
 * kafka.payments_topic (issue #44), keyed by its user id in decimal:
 *   {"v":1,"order_id":"<decimal>","user_id":N,"paid_at_ms":N,
 *    "ref":"<1..64 of [A-Za-z0-9_.:-]>","sig":"KID:HEX"}
 * order_id travels as a decimal string (63-bit ids lose precision as JSON
 * numbers in most parsers), like the orders'. "sig" is the payment
 * service's MAC over the payment (paysig.h); it decodes when absent, and
 * the consumer then refuses the payment as unsigned. Unknown members are
 * ignored (a later version may add some).
 *
 * Pure functions of their arguments: any thread. */
#ifndef SECKILL_PAYMSG_H
#define SECKILL_PAYMSG_H

#include <stddef.h>
#include <stdint.h>

#include "keyring.h"

#define PAY_VERSION 1
/* The longest payment reference. */
#define PAY_REF_MAX 64
/* The latest paid_at_ms taken: 9999-12-31T23:59:59.999Z. */
#define PAY_AT_MAX_MS INT64_C(253402300799999)
/* "KID:HEX" and its NUL. */
#define PAY_SIG_MAX KEYRING_SIG_MAX
/* Enough for the longest message paymsg_encode writes. */
#define PAY_MSG_MAX 320

struct pay_msg {
    int64_t order_id, user_id, paid_at_ms;
    char ref[PAY_REF_MAX + 1];
    char sig[PAY_SIG_MAX]; /* "" when the message had none */
};

/* Decode and validate a message: a JSON object without duplicate members,
 * "v" == PAY_VERSION, a positive order_id (decimal string), user_id and
 * paid_at_ms (up to PAY_AT_MAX_MS), a ref of 1 to PAY_REF_MAX of
 * [A-Za-z0-9_.:-], and "sig", when present, 1 to PAY_SIG_MAX - 1 of
 * [A-Za-z0-9_:-] (its check is paysig's). 0, or -1 with the reason in err. */
int paymsg_decode(const void *payload, size_t len, struct pay_msg *out, char *err, size_t errlen);
/* The Kafka key must be the user id in decimal: it routes a user's payments
 * to one partition, as it does their orders; a payment keyed otherwise (or
 * not at all) is not the user's. 0, or -1 with the reason in err. */
int paymsg_check_key(const struct pay_msg *m, const void *key, size_t key_len, char *err, size_t errlen);
/* The message (with "sig" when m has one) into buf: its length, or -1 when
 * it does not fit. */
int paymsg_encode(const struct pay_msg *m, char *buf, size_t len);

#endif
