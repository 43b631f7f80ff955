/* jsonint: an integer member of a JSON object, checked.
 *
 * jsonint_get finds the member, checks that it is a JSON integer (not a
 * real, a string or a boolean) and that it lies in [min, max], and says
 * which of these failed; the caller words the error for its reader (an
 * order message's, an HTTP body's). Exact: jansson refuses integers beyond
 * long long while parsing ("too big integer"), so a value that reaches here
 * is the one that was written. Any thread. */
#ifndef SECKILL_JSONINT_H
#define SECKILL_JSONINT_H

#include <jansson.h>
#include <stdint.h>

enum jsonint_status {
    JSONINT_OK,           /* *out set */
    JSONINT_MISSING,      /* no such member */
    JSONINT_NOT_INTEGER,  /* there, but not an integer */
    JSONINT_OUT_OF_RANGE, /* an integer outside [min, max] */
};

/* Member name of obj, an integer in [min, max], into *out (only when
 * JSONINT_OK). */
enum jsonint_status jsonint_get(const json_t *obj, const char *name, int64_t min, int64_t max, int64_t *out);

#endif
