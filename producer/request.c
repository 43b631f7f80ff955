#include "request.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static int member(json_t *root, const char *name, int64_t *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(root, name);
    if (!v) {
        snprintf(err, errlen, "missing %s", name);
        return -1;
    }
    /* jansson refuses integers beyond long long itself ("too big integer"),
     * so a value here is exact. */
    if (!json_is_integer(v)) {
        snprintf(err, errlen, "%s must be an integer", name);
        return -1;
    }
    if (json_integer_value(v) <= 0) {
        snprintf(err, errlen, "%s must be positive", name);
        return -1;
    }
    *out = (int64_t)json_integer_value(v);
    return 0;
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
    if (member(root, "user_id", &out->user_id, err, errlen) != 0 ||
        member(root, "item_id", &out->item_id, err, errlen) != 0)
        goto fail;
    json_decref(root);
    return 0;
fail:
    json_decref(root);
    return -1;
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
