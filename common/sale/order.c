#include "order.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "msgenv.h"
#include "util.h"

/* A signature "KID:HEX" (ordersig.h checks its form), at most
 * ORDER_SIG_MAX - 1 characters. */
static const char SIG_CHARS[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_:-";
#define SIG_WHAT "a string of 1 to 103 of [A-Za-z0-9_:-]"
_Static_assert(ORDER_SIG_MAX - 1 == 103, "SIG_WHAT names ORDER_SIG_MAX - 1");

int order_encode(const struct order *o, char *buf, size_t len)
{
    /* Only integers and the sig's [A-Za-z0-9_:-] go in (order_decode lets
     * no other character into sig), so printf is an exact JSON encoder here.
     * sig comes last: seckill_reserve re-stamps reserved_at_ms in place. */
    int n = snprintf(buf, len,
                     "{\"v\":%d,%s\"order_id\":\"%lld\",\"user_id\":%lld,\"item_id\":%lld,"
                     "\"qty\":%lld,\"reserved_at_ms\":%lld%s%s%s}",
                     ORDER_VERSION, o->kind == ORDER_CANCEL ? "\"type\":\"cancel\"," : "",
                     (long long)o->order_id, (long long)o->user_id,
                     (long long)o->item_id, (long long)o->qty, (long long)o->reserved_at_ms,
                     o->sig[0] ? ",\"sig\":\"" : "", o->sig, o->sig[0] ? "\"" : "");
    if (n < 0 || (size_t)n >= len)
        return -1;
    return n;
}

/* The optional "type" member into out->kind; 0, or -1 with err set. */
static int get_kind(json_t *root, struct order *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(root, "type");
    out->kind = ORDER_BUY;
    if (!v)
        return 0;
    if (!json_is_string(v) || strcmp(json_string_value(v), "cancel") != 0 ||
        json_string_length(v) != strlen("cancel")) {
        snprintf(err, errlen, "\"type\" is not \"cancel\"");
        return -1;
    }
    out->kind = ORDER_CANCEL;
    return 0;
}

int order_decode(const char *buf, size_t len, struct order *out, char *err, size_t errlen)
{
    json_t *root;
    int ret = -1;
    if (msgenv_open(buf, len, ORDER_VERSION, &root, err, errlen) != 0)
        return -1;
    if (get_kind(root, out, err, errlen) != 0 || msgenv_order_id(root, &out->order_id, err, errlen) != 0 ||
        msgenv_int(root, "user_id", 1, INT64_MAX, &out->user_id, err, errlen) != 0 ||
        msgenv_int(root, "item_id", 1, INT64_MAX, &out->item_id, err, errlen) != 0 ||
        msgenv_int(root, "qty", 1, 1, &out->qty, err, errlen) != 0 ||
        msgenv_int(root, "reserved_at_ms", 1, INT64_MAX, &out->reserved_at_ms, err, errlen) != 0 ||
        msgenv_word(root, "sig", SIG_CHARS, out->sig, sizeof(out->sig), 1, SIG_WHAT, err, errlen) != 0)
        goto out;
    ret = 0;
out:
    json_decref(root);
    return ret;
}

int64_t order_id_make(int64_t block, int64_t seq)
{
    if (block < 1 || block >= (INT64_C(1) << (63 - ORDER_ID_SEQ_BITS)) || seq < 0 ||
        seq >= (INT64_C(1) << ORDER_ID_SEQ_BITS))
        return -1;
    return (block << ORDER_ID_SEQ_BITS) | seq;
}
