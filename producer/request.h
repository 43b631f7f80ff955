/* request: the buyer's request body, parsed and validated.
 *
 * {"user_id": U, "item_id": I} with U and I positive JSON integers that fit
 * in 64 bits; user_id may be left out (with producer.auth = "jwt" the buyer
 * is the token's, and a user_id present must name the same buyer). Anything
 * else is refused with a reason the client can read: strings, reals, zero or
 * negative numbers, a missing item_id, duplicate members, trailing garbage.
 * Members beyond these two are ignored.
 *
 * Also the ids in the status calls' paths. */
#ifndef SECKILL_REQUEST_H
#define SECKILL_REQUEST_H

#include <stddef.h>
#include <stdint.h>

struct req_body {
    int64_t user_id; /* 0 when the body has none */
    int64_t item_id;
};

/* 0, or -1 with a short reason (safe to return to the client) in err. */
int req_parse(const char *body, size_t len, struct req_body *out, char *err, size_t errlen);

/* When url is prefix followed by a positive decimal int64 and nothing else
 * ("/api/v1/orders/" + "123"), 1 with the id in *id; 0 when url does not
 * start with prefix; -1 when it does but the rest is not such an id. */
int req_path_id(const char *url, const char *prefix, int64_t *id);

/* True for "application/json", with optional parameters ("; charset=utf-8"),
 * in any letter case. */
int req_content_type_ok(const char *value);

#endif
