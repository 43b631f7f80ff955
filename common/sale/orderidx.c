#include "orderidx.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"

/* "ITEM:USER" and an order id's decimal, with room to spare. */
#define OIDX_VAL_MAX 48
#define OIDX_FIELD_MAX 24

static int by_order(const void *a, const void *b)
{
    const struct oidx_entry *x = a, *y = b;
    return (x->order_id > y->order_id) - (x->order_id < y->order_id);
}

int oidx_field(char *buf, size_t len, int64_t order_id)
{
    return snprintf(buf, len, "%" PRId64, order_id);
}

/* HSET key f v ... for e[0..n), all of one bucket, then PEXPIRE key. The
 * number of commands appended: 2, or fewer when out of memory. */
static int append_bucket(struct rp_batch *b, const char *prefix, const char *ttl_ms,
                         const struct oidx_entry *e, size_t n)
{
    char key[KEYS_MAX];
    const char **argv = malloc((2 + 2 * n) * sizeof(*argv));
    char(*text)[OIDX_VAL_MAX] = malloc(2 * n * sizeof(*text));
    int ret = 0;
    if (!argv || !text || keys_order_bucket(key, sizeof(key), prefix, e[0].order_id) < 0)
        goto fail;
    argv[0] = "HSET";
    argv[1] = key;
    for (size_t i = 0; i < n; i++) {
        oidx_field(text[2 * i], OIDX_FIELD_MAX, e[i].order_id);
        snprintf(text[2 * i + 1], OIDX_VAL_MAX, "%" PRId64 ":%" PRId64, e[i].item_id, e[i].user_id);
        argv[2 + 2 * i] = text[2 * i];
        argv[3 + 2 * i] = text[2 * i + 1];
    }
    const char *expire[] = { "PEXPIRE", key, ttl_ms };
    if (rp_add(b, key, (int)(2 + 2 * n), argv, NULL) < 0)
        goto fail;
    ret = rp_add(b, key, 3, expire, NULL) >= 0 ? 2 : 1;
fail:
    free(argv);
    free(text);
    return ret;
}

int oidx_add(struct rp_batch *b, const char *prefix, int ttl_s, struct oidx_entry *e, size_t n)
{
    char ttl_ms[24];
    int cmds = 0;
    snprintf(ttl_ms, sizeof(ttl_ms), "%" PRId64, (int64_t)ttl_s * 1000);
    qsort(e, n, sizeof(*e), by_order);
    for (size_t i = 0, j; i < n; i = j) {
        for (j = i + 1; j < n && e[j].order_id / ORDERIDX_BUCKET == e[i].order_id / ORDERIDX_BUCKET; j++)
            ;
        int c = append_bucket(b, prefix, ttl_ms, e + i, j - i);
        cmds += c;
        if (c < 2)
            break;
    }
    return cmds;
}
