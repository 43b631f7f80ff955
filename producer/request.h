/* request: the buyer's request body, parsed and validated.
 *
 * {"user_id": U, "item_id": I} with U and I positive JSON integers that fit
 * in 64 bits. Anything else is refused with a reason the client can read:
 * strings, reals, zero or negative numbers, missing members, duplicate
 * members, trailing garbage. Members beyond these two are ignored. */
#ifndef SECKILL_REQUEST_H
#define SECKILL_REQUEST_H

#include <stddef.h>
#include <stdint.h>

struct req_body {
    int64_t user_id;
    int64_t item_id;
};

/* 0, or -1 with a short reason (safe to return to the client) in err. */
int req_parse(const char *body, size_t len, struct req_body *out, char *err, size_t errlen);

/* True for "application/json", with optional parameters ("; charset=utf-8"),
 * in any letter case. */
int req_content_type_ok(const char *value);

#endif
