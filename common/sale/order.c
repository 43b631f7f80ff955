#include "order.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "jsonint.h"
#include "util.h"

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

/* The optional "sig" member into out->sig; 0, or -1 with err set. */
static int get_sig(json_t *root, struct order *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(root, "sig");
    const char *s;
    size_t n;
    memset(out->sig, 0, sizeof(out->sig)); /* all of it: a decoded order compares whole */
    if (!v)
        return 0;
    if (!json_is_string(v) || (n = json_string_length(v)) == 0 || n >= sizeof(out->sig)) {
        snprintf(err, errlen, "\"sig\" is not a string of 1 to %d characters", ORDER_SIG_MAX - 1);
        return -1;
    }
    s = json_string_value(v);
    if (strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_:-") != n) {
        snprintf(err, errlen, "\"sig\" has a character other than [A-Za-z0-9_:-]");
        return -1;
    }
    memcpy(out->sig, s, n + 1);
    return 0;
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

/* A JSON integer member in [min, max]; 0, or -1 with err set. */
static int get_int(json_t *root, const char *name, int64_t min, int64_t max, int64_t *out,
                   char *err, size_t errlen)
{
    switch (jsonint_get(root, name, min, max, out)) {
    case JSONINT_OK: return 0;
    case JSONINT_MISSING: snprintf(err, errlen, "missing \"%s\"", name); break;
    case JSONINT_NOT_INTEGER: snprintf(err, errlen, "\"%s\" is not an integer", name); break;
    case JSONINT_OUT_OF_RANGE: snprintf(err, errlen, "\"%s\" out of range", name); break;
    }
    return -1;
}

int order_decode(const char *buf, size_t len, struct order *out, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    int64_t v;
    json_t *id;
    if (!root) {
        snprintf(err, errlen, "bad JSON: %s", jerr.text);
        goto fail;
    }
    if (!json_is_object(root)) {
        snprintf(err, errlen, "not a JSON object");
        goto fail;
    }
    if (get_int(root, "v", 0, INT64_MAX, &v, err, errlen) != 0)
        goto fail;
    if (v != ORDER_VERSION) {
        snprintf(err, errlen, "unknown version %lld", (long long)v);
        goto fail;
    }
    if (get_kind(root, out, err, errlen) != 0)
        goto fail;
    id = json_object_get(root, "order_id");
    if (!id || !json_is_string(id)) {
        snprintf(err, errlen, "missing \"order_id\" string");
        goto fail;
    }
    if (util_parse_i64(json_string_value(id), 1, INT64_MAX, &out->order_id) != 0) {
        snprintf(err, errlen, "\"order_id\" is not a positive 64-bit integer");
        goto fail;
    }
    if (get_int(root, "user_id", 1, INT64_MAX, &out->user_id, err, errlen) != 0 ||
        get_int(root, "item_id", 1, INT64_MAX, &out->item_id, err, errlen) != 0 ||
        get_int(root, "qty", 1, 1, &out->qty, err, errlen) != 0 ||
        get_int(root, "reserved_at_ms", 1, INT64_MAX, &out->reserved_at_ms, err, errlen) != 0 ||
        get_sig(root, out, err, errlen) != 0)
        goto fail;
    json_decref(root);
    return 0;
fail:
    json_decref(root);
    return -1;
}

int64_t order_id_make(int64_t block, int64_t seq)
{
    if (block < 1 || block >= (INT64_C(1) << (63 - ORDER_ID_SEQ_BITS)) || seq < 0 ||
        seq >= (INT64_C(1) << ORDER_ID_SEQ_BITS))
        return -1;
    return (block << ORDER_ID_SEQ_BITS) | seq;
}
