/* libFuzzer harness for the buyer's request body (req_parse), the
 * Content-Type check and the ids in the status calls' paths: all see bytes
 * straight off the network. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct req_body rb;
    /* A small error buffer, so a reason longer than it must be cut, not
     * overflow. */
    char err[16];
    memset(err, 'x', sizeof(err));
    /* libFuzzer's buffer is exactly size bytes on the heap: a read past the
     * body (as if it were NUL-terminated) is an ASan report. */
    int rc = req_parse((const char *)data, size, &rb, err, sizeof(err));
    if (rc == 0) {
        /* The API promises positive ids; anything else would reach Redis. */
        if (rb.user_id < 0 || rb.item_id <= 0)
            abort();
    } else if (rc != -1 || memchr(err, '\0', sizeof(err)) == NULL) {
        abort();
    }

    /* The header value arrives NUL-terminated from libmicrohttpd. */
    char *ct = malloc(size + 1);
    if (!ct)
        return 0;
    memcpy(ct, data, size);
    ct[size] = '\0';
    (void)req_content_type_ok(ct);
    /* The URL arrives NUL-terminated as well; an id it yields is positive. */
    int64_t id = 0;
    int pr = req_path_id(ct, "/api/v1/orders/", &id);
    if (pr < -1 || pr > 1 || (pr == 1 && id <= 0))
        abort();
    free(ct);
    return 0;
}
