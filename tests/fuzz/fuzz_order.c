/* libFuzzer harness for the Kafka order message decoder. Besides memory
 * errors it checks a property: whatever order_decode accepts, order_encode
 * writes a message that decodes to the very same order, and encoding that
 * again gives the same bytes. A consumer re-publishing (dead-letter, retry)
 * must never change an order. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "order.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* detail: the message or error that shows it, or NULL. */
static void die(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_order: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct order o, back;
    char err[64], err2[64];
    char msg[ORDER_MSG_MAX], msg2[ORDER_MSG_MAX];
    /* Garbage in the struct, so a field decode forgets to set shows up in
     * the comparison below rather than matching by luck. */
    memset(&o, 0xa5, sizeof(o));
    memset(&back, 0x5a, sizeof(back));
    memset(err, 'x', sizeof(err));

    if (order_decode((const char *)data, size, &o, err, sizeof(err)) != 0) {
        if (memchr(err, '\0', sizeof(err)) == NULL)
            die("error message not terminated", NULL);
        return 0;
    }
    if (o.order_id <= 0 || o.user_id <= 0 || o.item_id <= 0 || o.qty != 1 ||
        o.reserved_at_ms <= 0)
        die("accepted an invalid order", NULL);

    int n = order_encode(&o, msg, sizeof(msg));
    if (n <= 0)
        die("ORDER_MSG_MAX too small for a decoded order", NULL);
    if (order_decode(msg, (size_t)n, &back, err2, sizeof(err2)) != 0)
        die("re-encoded order does not decode", err2);
    /* struct order is five int64_t and a sig of 104 bytes, zeroed past its
     * end by order_decode: no padding, no stale bytes, memcmp is exact. */
    if (memcmp(&o, &back, sizeof(o)) != 0)
        die("round trip changed the order", msg);
    int n2 = order_encode(&back, msg2, sizeof(msg2));
    if (n2 != n || memcmp(msg, msg2, (size_t)n) != 0)
        die("encoding is not stable", msg2);
    return 0;
}
