#include "jsonint.h"

enum jsonint_status jsonint_get(const json_t *obj, const char *name, int64_t min, int64_t max, int64_t *out)
{
    json_t *v = json_object_get(obj, name);
    json_int_t i;
    if (!v)
        return JSONINT_MISSING;
    if (!json_is_integer(v))
        return JSONINT_NOT_INTEGER;
    i = json_integer_value(v);
    if (i < min || i > max)
        return JSONINT_OUT_OF_RANGE;
    *out = (int64_t)i;
    return JSONINT_OK;
}
