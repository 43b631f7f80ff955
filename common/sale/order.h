/* order: the order message on the Kafka topic, and order ids.
 *
 * The message is JSON with a version field, so a consumer can refuse what it
 * does not understand instead of guessing:
 *   {"v":1,"order_id":"…","user_id":…,"item_id":…,"qty":1,"reserved_at_ms":…,"sig":"KID:HEX"}
 * order_id travels as a decimal string because JSON numbers above 2^53 lose
 * precision in most parsers; the ids are 63-bit. "sig" is the producer's
 * MAC over the order (common/sale/ordersig.h): it travels inside the
 * message, so the bytes the producer stores in Redis, and that the sweeper,
 * a replay and the dead-letter topic carry on, stay verifiable by a
 * consumer without any of them holding the key.
 *
 * A buyer's cancel of an unpaid order (issue #44) travels on the same topic,
 * keyed by the same user, so it reaches the consumer after the order it
 * cancels: the same message with "type":"cancel" (absent: an order), the
 * order's own ids, qty 1, reserved_at_ms the time of the request, and a sig
 * over a text of its own (ordersig.h), so no order's MAC makes it a cancel.
 *
 * Order ids are (block << ORDER_ID_SEQ_BITS) | seq. A block is taken from a
 * PostgreSQL identity in a committed transaction (see order_id_block.sql), so
 * no two producers, on any host, across any restart, share one, and taking one
 * costs a round trip per 2^ORDER_ID_SEQ_BITS orders, never per request. */
#ifndef SECKILL_ORDER_H
#define SECKILL_ORDER_H

#include <stddef.h>
#include <stdint.h>

#define ORDER_VERSION 1
#define ORDER_ID_SEQ_BITS 20
/* "KID:HEX": a key id of up to 32 characters, ':', 64 hex digits, NUL (98),
 * rounded up to 104 so struct order has no padding: a decoded order then
 * compares whole (memcmp) with the one encoded. */
#define ORDER_SIG_MAX 104
/* Enough for the longest message order_encode() writes. */
#define ORDER_MSG_MAX 320
/* Decimal digits of an int64 plus NUL. */
#define ORDER_ID_STR_MAX 21

enum order_kind {
    ORDER_BUY = 0,    /* an order: the unit reserved for its buyer */
    ORDER_CANCEL = 1, /* its buyer cancels order_id (unpaid only) */
};

struct order {
    int64_t order_id;
    int64_t user_id;
    int64_t item_id;
    int64_t qty;
    int64_t reserved_at_ms;
    int64_t kind; /* enum order_kind; int64_t: no padding (see ORDER_SIG_MAX) */
    char sig[ORDER_SIG_MAX]; /* "" when the message had none */
};

/* Write the message into buf; returns its length, or -1 if it does not fit. */
int order_encode(const struct order *o, char *buf, size_t len);

/* Decode and validate a message: a JSON object, "v" == ORDER_VERSION,
 * "type" absent (ORDER_BUY) or "cancel" (ORDER_CANCEL),
 * positive order_id (decimal string), user_id, item_id and reserved_at_ms,
 * qty == 1; "sig", when present, a string of [A-Za-z0-9_:-] shorter than
 * ORDER_SIG_MAX (its check is ordersig's). Unknown members are ignored (a later version may add some).
 * 0, or -1 with the reason in err. */
int order_decode(const char *buf, size_t len, struct order *out, char *err, size_t errlen);

/* Order id from a block and a sequence number in it; -1 if out of range. */
int64_t order_id_make(int64_t block, int64_t seq);

#endif
