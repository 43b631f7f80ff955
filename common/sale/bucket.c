#include "bucket.h"

#include <stdbool.h>
#include <stdio.h>

#include "keys.h"

/* splitmix64's finaliser: every bit of the id moves every bit of the hash,
 * so consecutive user ids spread evenly. Fixed: see bucket.h. */
static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

int bucket_of(int64_t user_id, int k)
{
    return k <= 1 ? 0 : (int)(mix((uint64_t)user_id) % (uint64_t)k);
}

/* The primary of the item's stock key under salt; -2 when it does not fit. */
static int node_at(const char *prefix, int64_t item, int salt, bucket_node_fn node_of, void *arg)
{
    char key[KEYS_MAX];
    if (keys_item_at(key, sizeof(key), prefix, item, salt, KEYS_ITEM_STOCK) < 0)
        return -2;
    return node_of(arg, key);
}

/* The lowest salt not in taken[0 .. n-1] whose primary carries `want`
 * buckets (load[]), or -1 when none of the tries does; -2 for a key that
 * does not fit. */
static int salt_on_lightest(const char *prefix, int64_t item, int nodes, bucket_node_fn node_of, void *arg,
                            const int *taken, int n, const int *load, int want)
{
    for (int s = 0; s < BUCKET_SALT_TRIES; s++) {
        bool used = false;
        for (int i = 0; i < n && !used; i++)
            used = taken[i] == s;
        if (used)
            continue;
        int node = node_at(prefix, item, s, node_of, arg);
        if (node == -2)
            return -2;
        if (node >= 0 && node < nodes && load[node] == want)
            return s;
    }
    return -1;
}

int bucket_place(const char *prefix, int64_t item, int k, int nodes, bucket_node_fn node_of, void *arg,
                 int salts[BUCKET_MAX])
{
    int load[BUCKET_MAX * 4] = { 0 };
    if (k < 1 || k > BUCKET_MAX || nodes < 1)
        return -1;
    if (nodes > (int)(sizeof(load) / sizeof(load[0])))
        nodes = (int)(sizeof(load) / sizeof(load[0]));
    for (int b = 0; b < k; b++) {
        int s = -1, least = load[0];
        for (int n = 1; n < nodes; n++)
            least = load[n] < least ? load[n] : least;
        /* The fewest buckets any primary carries, then one more, ...: a
         * primary no salt reaches in the tries is passed over. */
        for (int want = least; want <= b && s == -1; want++)
            s = salt_on_lightest(prefix, item, nodes, node_of, arg, salts, b, load, want);
        if (s < 0)
            return -1;
        salts[b] = s;
        load[node_at(prefix, item, s, node_of, arg)]++;
    }
    return 0;
}

int bucket_spread(const char *prefix, int64_t item, int k, const int salts[], bucket_node_fn node_of,
                  void *arg)
{
    int seen[BUCKET_MAX], n = 0;
    for (int b = 0; b < k && b < BUCKET_MAX; b++) {
        int node = node_at(prefix, item, salts[b], node_of, arg);
        bool dup = false;
        if (node < 0)
            return -1;
        for (int i = 0; i < n && !dup; i++)
            dup = seen[i] == node;
        if (!dup)
            seen[n++] = node;
    }
    return n;
}

int bucket_parse(const char *text, int salts[BUCKET_MAX], int *k)
{
    int n = 0;
    const char *s = text;
    *k = 1;
    if (!*s)
        return 0;
    for (;;) {
        int v = 0, digits = 0;
        for (; *s >= '0' && *s <= '9' && digits < 5; s++, digits++)
            v = v * 10 + (*s - '0');
        if (!digits || v >= BUCKET_SALT_TRIES || n == BUCKET_MAX)
            return -1;
        for (int i = 0; i < n; i++)
            if (salts[i] == v)
                return -1;
        salts[n++] = v;
        if (!*s)
            break;
        if (*s++ != ',')
            return -1;
    }
    if (n < 2)
        return -1;
    *k = n;
    return 0;
}

int bucket_format(char *buf, size_t len, const int salts[], int k)
{
    size_t used = 0;
    if (len == 0)
        return -1;
    buf[0] = '\0';
    for (int i = 0; k > 1 && i < k; i++) {
        int n = snprintf(buf + used, len - used, i ? ",%d" : "%d", salts[i]);
        if (n < 0 || (size_t)n >= len - used)
            return -1;
        used += (size_t)n;
    }
    return (int)used;
}
