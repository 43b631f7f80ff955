#include "request.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "jsonint.h"
#include "util.h"

/* A positive id member; an optional one that is absent reads 0. The errors
 * are worded for the buyer: they are the 400's body. 0, or -1 with err set. */
static int member(json_t *root, const char *name, int optional, int64_t *out, char *err, size_t errlen)
{
    switch (jsonint_get(root, name, 1, INT64_MAX, out)) {
    case JSONINT_OK: return 0;
    case JSONINT_MISSING:
        if (optional) {
            *out = 0;
            return 0;
        }
        snprintf(err, errlen, "missing %s", name);
        break;
    case JSONINT_NOT_INTEGER: snprintf(err, errlen, "%s must be an integer", name); break;
    case JSONINT_OUT_OF_RANGE: snprintf(err, errlen, "%s must be positive", name); break;
    }
    return -1;
}

int req_parse(const char *body, size_t len, struct req_body *out, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *root = NULL;
    if (len == 0) {
        snprintf(err, errlen, "empty body");
        goto fail;
    }
    /* JSON_REJECT_DUPLICATES: {"user_id":1,"user_id":2} must not pick one. */
    root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        snprintf(err, errlen, "malformed JSON: %s", jerr.text);
        goto fail;
    }
    if (!json_is_object(root)) {
        snprintf(err, errlen, "body must be a JSON object");
        goto fail;
    }
    if (member(root, "user_id", 1, &out->user_id, err, errlen) != 0 ||
        member(root, "item_id", 0, &out->item_id, err, errlen) != 0)
        goto fail;
    json_decref(root);
    return 0;
fail:
    json_decref(root);
    return -1;
}

int req_path_id(const char *url, const char *prefix, int64_t *id)
{
    size_t n = strlen(prefix);
    if (strncmp(url, prefix, n) != 0)
        return 0;
    /* util_parse_i64 refuses signs, blanks, junk and overflow; leading
     * zeros would give one order two names, so refuse them too. */
    if (url[n] == '0' || util_parse_i64(url + n, 1, INT64_MAX, id) != 0)
        return -1;
    return 1;
}

int req_content_type_ok(const char *value)
{
    static const char want[] = "application/json";
    size_t n = sizeof(want) - 1;
    if (!value || strncasecmp(value, want, n) != 0)
        return 0;
    value += n;
    while (*value == ' ' || *value == '\t')
        value++;
    return *value == '\0' || *value == ';';
}
