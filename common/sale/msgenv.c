#include "msgenv.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "jsonint.h"
#include "util.h"

int msgenv_open(const void *buf, size_t len, int64_t version, json_t **root, char *err, size_t errlen)
{
    json_error_t jerr;
    int64_t v;
    json_t *r = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    *root = NULL;
    if (!r) {
        snprintf(err, errlen, "bad JSON: %s", jerr.text);
        return -1;
    }
    if (!json_is_object(r)) {
        snprintf(err, errlen, "not a JSON object");
        goto fail;
    }
    if (msgenv_int(r, "v", 0, INT64_MAX, &v, err, errlen) != 0)
        goto fail;
    if (v != version) {
        snprintf(err, errlen, "unknown version %lld", (long long)v);
        goto fail;
    }
    *root = r;
    return 0;
fail:
    json_decref(r);
    return -1;
}

int msgenv_int(json_t *root, const char *name, int64_t min, int64_t max, int64_t *out, char *err,
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

int msgenv_order_id(json_t *root, int64_t *out, char *err, size_t errlen)
{
    json_t *id = json_object_get(root, "order_id");
    if (!id || !json_is_string(id)) {
        snprintf(err, errlen, "missing \"order_id\" string");
        return -1;
    }
    if (util_parse_i64(json_string_value(id), 1, INT64_MAX, out) != 0) {
        snprintf(err, errlen, "\"order_id\" is not a positive 64-bit integer");
        return -1;
    }
    return 0;
}

int msgenv_word(json_t *root, const char *name, const char *chars, char *out, size_t size, int optional,
                const char *what, char *err, size_t errlen)
{
    json_t *v = json_object_get(root, name);
    size_t n;
    memset(out, 0, size); /* all of it: a decoded message compares whole */
    if (!v && optional)
        return 0;
    if (!v || !json_is_string(v) || (n = json_string_length(v)) == 0 || n >= size ||
        strspn(json_string_value(v), chars) != n) {
        snprintf(err, errlen, "\"%s\" is not %s", name, what);
        return -1;
    }
    memcpy(out, json_string_value(v), n + 1);
    return 0;
}

int msgenv_key_is_user(const void *key, size_t key_len, int64_t user_id, const char *what, char *err,
                       size_t errlen)
{
    char want[UTIL_I64_CHARS + 1];
    int n = snprintf(want, sizeof(want), "%" PRId64, user_id);
    if (!key) {
        snprintf(err, errlen, "no key: %s is keyed by its user id", what);
        return -1;
    }
    if (key_len != (size_t)n || memcmp(key, want, (size_t)n) != 0) {
        snprintf(err, errlen, "key is not the user id");
        return -1;
    }
    return 0;
}
