#include "keys.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "orderidx.h"
#include "util.h"

static int fits(int n, size_t len)
{
    return n < 0 || (size_t)n >= len ? -1 : n;
}

static const char *const item_suffix[] = { "stock",  "buyers",   "pending", "unpub", "window",
                                           "orders", "returned", "changes", "xout",  "xin" };

int keys_item(char *buf, size_t len, const char *prefix, int64_t item_id, enum keys_item_part part)
{
    return fits(snprintf(buf, len, "%s:{item:%" PRId64 "}:%s", prefix, item_id, item_suffix[part]), len);
}

int keys_item_at(char *buf, size_t len, const char *prefix, int64_t item_id, int salt,
                 enum keys_item_part part)
{
    if (salt < 0)
        return keys_item(buf, len, prefix, item_id, part);
    int n = snprintf(buf, len, "%s:{item:%" PRId64 ":%d}:%s", prefix, item_id, salt, item_suffix[part]);
    return fits(n, len);
}

int keys_item_all(char k[KEYS_ITEM_PARTS][KEYS_MAX], const char *prefix, int64_t item_id)
{
    return keys_item_all_at(k, prefix, item_id, -1); /* the item's own slot (BUCKET_HOME) */
}

int keys_item_all_at(char k[KEYS_ITEM_PARTS][KEYS_MAX], const char *prefix, int64_t item_id, int salt)
{
    for (int i = 0; i < KEYS_ITEM_PARTS; i++)
        if (keys_item_at(k[i], KEYS_MAX, prefix, item_id, salt, (enum keys_item_part)i) < 0)
            return -1;
    return 0;
}

int keys_queue(char *buf, size_t len, const char *prefix, int64_t item_id, enum keys_queue_part part)
{
    static const char *const suffix[] = { "queue", "queue:pre", "queue:line", "queue:seen", "queue:adm",
                                          "queue:used" };
    return fits(snprintf(buf, len, "%s:{item:%" PRId64 "}:%s", prefix, item_id, suffix[part]), len);
}

int keys_queue_all(char k[KEYS_QUEUE_PARTS][KEYS_MAX], const char *prefix, int64_t item_id)
{
    for (int i = 0; i < KEYS_QUEUE_PARTS; i++)
        if (keys_queue(k[i], KEYS_MAX, prefix, item_id, (enum keys_queue_part)i) < 0)
            return -1;
    return 0;
}

int keys_items(char *buf, size_t len, const char *prefix)
{
    return fits(snprintf(buf, len, "%s:items", prefix), len);
}

int keys_order_bucket(char *buf, size_t len, const char *prefix, int64_t order_id)
{
    return fits(snprintf(buf, len, "%s:order:ix:{%" PRId64 "}", prefix, order_id / ORDERIDX_BUCKET), len);
}

int keys_order_legacy(char *buf, size_t len, const char *prefix, int64_t order_id)
{
    return fits(snprintf(buf, len, "%s:order:{%" PRId64 "}", prefix, order_id), len);
}

/* FNV-1a (32 bits): a hash every version and host computes alike, which is
 * all a lock's group needs; changing it moves every lock to other keys (see
 * keys.h). */
unsigned keys_lock_group(const char *name)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 16777619u;
    }
    return h % KEYS_LOCK_GROUPS;
}

int keys_lock(char *buf, size_t len, const char *prefix, const char *name)
{
    return fits(snprintf(buf, len, "%s:lock:{lk:%u}", prefix, keys_lock_group(name)), len);
}

int keys_user_lock(char *buf, size_t len, int64_t user_id)
{
    /* util_i64_text, not snprintf: a batch names a thousand users. */
    char id[UTIL_I64_CHARS];
    size_t n = util_i64_text(id, user_id);
    if (len < sizeof("user:") + n)
        return -1;
    memcpy(buf, "user:", 5);
    memcpy(buf + 5, id, n + 1);
    return (int)(5 + n);
}
