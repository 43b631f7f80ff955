#include "paymsg.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "jsonint.h"
#include "util.h"

static const char REF_CHARS[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:-";
static const char SIG_CHARS[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_:-";

static int get_int(json_t *root, const char *name, int64_t min, int64_t max, int64_t *out, char *err,
                   size_t errlen)
{
    switch (jsonint_get(root, name, min, max, out)) {
    case JSONINT_OK: return 0;
    case JSONINT_MISSING: snprintf(err, errlen, "missing \"%s\"", name); break;
    case JSONINT_NOT_INTEGER: snprintf(err, errlen, "\"%s\" is not an integer", name); break;
    case JSONINT_OUT_OF_RANGE: snprintf(err, errlen, "\"%s\" out of range", name); break;
    }
    return -1;
}

/* The member name, a string of 1 to max - 1 of chars, into out. 0, or -1
 * with err (what says what it must be). */
static int get_word(json_t *root, const char *name, const char *chars, size_t max, char *out, bool optional,
                    const char *what, char *err, size_t errlen)
{
    json_t *v = json_object_get(root, name);
    size_t n;
    out[0] = '\0';
    if (!v && optional)
        return 0;
    if (!v || !json_is_string(v) || (n = json_string_length(v)) == 0 || n >= max ||
        strspn(json_string_value(v), chars) != n) {
        snprintf(err, errlen, "\"%s\" is not %s", name, what);
        return -1;
    }
    memcpy(out, json_string_value(v), n + 1);
    return 0;
}

static int get_strings(json_t *root, struct pay_msg *out, char *err, size_t errlen)
{
    json_t *id = json_object_get(root, "order_id");
    if (!id || !json_is_string(id)) {
        snprintf(err, errlen, "missing \"order_id\" string");
        return -1;
    }
    if (util_parse_i64(json_string_value(id), 1, INT64_MAX, &out->order_id) != 0) {
        snprintf(err, errlen, "\"order_id\" is not a positive 64-bit integer");
        return -1;
    }
    if (get_word(root, "ref", REF_CHARS, sizeof(out->ref), out->ref, false, "1 to 64 of [A-Za-z0-9_.:-]", err,
                 errlen) != 0)
        return -1;
    return get_word(root, "sig", SIG_CHARS, sizeof(out->sig), out->sig, true,
                    "a string of 1 to 97 of [A-Za-z0-9_:-]", err, errlen);
}

int paymsg_decode(const void *payload, size_t len, struct pay_msg *out, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *root = json_loadb(payload, len, JSON_REJECT_DUPLICATES, &jerr);
    int64_t v;
    int ret = -1;
    memset(out, 0, sizeof(*out));
    if (!root) {
        snprintf(err, errlen, "bad JSON: %s", jerr.text);
        return -1;
    }
    if (!json_is_object(root)) {
        snprintf(err, errlen, "not a JSON object");
        goto out;
    }
    if (get_int(root, "v", 0, INT64_MAX, &v, err, errlen) != 0)
        goto out;
    if (v != PAY_VERSION) {
        snprintf(err, errlen, "unknown version %lld", (long long)v);
        goto out;
    }
    if (get_strings(root, out, err, errlen) != 0 ||
        get_int(root, "user_id", 1, INT64_MAX, &out->user_id, err, errlen) != 0 ||
        get_int(root, "paid_at_ms", 1, PAY_AT_MAX_MS, &out->paid_at_ms, err, errlen) != 0)
        goto out;
    ret = 0;
out:
    json_decref(root);
    return ret;
}

int paymsg_check_key(const struct pay_msg *m, const void *key, size_t key_len, char *err, size_t errlen)
{
    char want[24];
    int n = snprintf(want, sizeof(want), "%" PRId64, m->user_id);
    if (!key || key_len != (size_t)n || memcmp(key, want, (size_t)n) != 0) {
        snprintf(err, errlen, "key is not the user id");
        return -1;
    }
    return 0;
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
