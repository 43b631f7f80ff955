#include "paymsg.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "msgenv.h"

static const char REF_CHARS[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:-";
static const char SIG_CHARS[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_:-";

static int get_strings(json_t *root, struct pay_msg *out, char *err, size_t errlen)
{
    if (msgenv_order_id(root, &out->order_id, err, errlen) != 0 ||
        msgenv_word(root, "ref", REF_CHARS, out->ref, sizeof(out->ref), 0, "1 to 64 of [A-Za-z0-9_.:-]", err,
                    errlen) != 0)
        return -1;
    return msgenv_word(root, "sig", SIG_CHARS, out->sig, sizeof(out->sig), 1,
                       "a string of 1 to 97 of [A-Za-z0-9_:-]", err, errlen);
}

int paymsg_decode(const void *payload, size_t len, struct pay_msg *out, char *err, size_t errlen)
{
    json_t *root;
    int ret = -1;
    memset(out, 0, sizeof(*out));
    if (msgenv_open(payload, len, PAY_VERSION, &root, err, errlen) != 0)
        return -1;
    if (get_strings(root, out, err, errlen) != 0 ||
        msgenv_int(root, "user_id", 1, INT64_MAX, &out->user_id, err, errlen) != 0 ||
        msgenv_int(root, "paid_at_ms", 1, PAY_AT_MAX_MS, &out->paid_at_ms, err, errlen) != 0)
        goto out;
    ret = 0;
out:
    json_decref(root);
    return ret;
}

int paymsg_check_key(const struct pay_msg *m, const void *key, size_t key_len, char *err, size_t errlen)
{
    return msgenv_key_is_user(key, key_len, m->user_id, "a payment", err, errlen);
}

int paymsg_encode(const struct pay_msg *m, char *buf, size_t len)
{
    /* Only integers, the ref's [A-Za-z0-9_.:-] and the sig's [A-Za-z0-9_:-]
     * go in (paymsg_decode lets no other character into either), so printf
     * is an exact JSON encoder here. */
    int n = snprintf(buf, len,
                     "{\"v\":%d,\"order_id\":\"%" PRId64 "\",\"user_id\":%" PRId64 ",\"paid_at_ms\":%" PRId64
                     ",\"ref\":\"%s\"%s%s%s}",
                     PAY_VERSION, m->order_id, m->user_id, m->paid_at_ms, m->ref,
                     m->sig[0] ? ",\"sig\":\"" : "", m->sig, m->sig[0] ? "\"" : "");
    if (n < 0 || (size_t)n >= len)
        return -1;
    return n;
}
