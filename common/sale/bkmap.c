#include "bkmap.h"

#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "i64map.h"
#include "keys.h"
#include "log.h"
#include "util.h"

/* At most this many items asked in one round trip (a batch names fewer). */
#define BKMAP_ASK_MAX 512

struct bk_entry {
    int64_t learned_ms; /* monotonic; 0: forgotten */
    int k;
    int salts[BUCKET_MAX];
};

struct bkmap {
    struct i64map items; /* item -> struct bk_entry */
    struct rp_batch ask;
};

struct bkmap *bkmap_new(void)
{
    struct bkmap *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    i64map_init(&m->items, 1, sizeof(struct bk_entry));
    rp_batch_init(&m->ask);
    return m;
}

void bkmap_free(struct bkmap *m)
{
    if (!m)
        return;
    i64map_free(&m->items);
    rp_batch_free(&m->ask);
    free(m);
}

static bool fresh(const struct bkmap *m, int64_t item, int64_t now)
{
    const struct bk_entry *e = i64map_get(&m->items, &item);
    return e && e->learned_ms && now - e->learned_ms < BKMAP_TTL_MS;
}

/* One reply into the item's entry: a string of salts, or nil for none. */
static void learn_one(struct bkmap *m, int64_t item, const redisReply *r, int64_t now)
{
    struct bk_entry got = { now, 1, { 0 } }, *e;
    if (r->type == REDIS_REPLY_STRING && bucket_parse(r->str, got.salts, &got.k) != 0) {
        log_debug("buckets: item %" PRId64 ": its window names buckets '%s': taken as none", item, r->str);
        got.k = 1;
    }
    if ((e = i64map_put(&m->items, &item)) != NULL)
        *e = got;
}

int bkmap_learn(struct bkmap *m, struct rp *p, const char *prefix, const int64_t *items, size_t n)
{
    int64_t asked[BKMAP_ASK_MAX], now = util_mono_ms();
    size_t na = 0;
    int ret = 0;
    char key[KEYS_MAX], err[128];
    rp_batch_reset(&m->ask);
    for (size_t i = 0; i < n && na < BKMAP_ASK_MAX; i++) {
        bool dup = false;
        for (size_t j = 0; j < na && !dup; j++)
            dup = asked[j] == items[i];
        if (dup || fresh(m, items[i], now))
            continue;
        if (keys_item(key, sizeof(key), prefix, items[i], KEYS_ITEM_WINDOW) < 0 ||
            rp_addf(&m->ask, key, "HGET %s %s", key, KEYS_WINDOW_BUCKETS) < 0)
            return -1;
        asked[na++] = items[i];
    }
    if (na == 0)
        return 0;
    (void)rp_run(p, &m->ask, err, sizeof(err));
    for (size_t i = 0; i < na; i++) {
        const redisReply *r = rp_reply(&m->ask, (int)i);
        if (r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_NIL))
            learn_one(m, asked[i], r, now);
        else
            ret = -1; /* kept as it was */
    }
    return ret;
}

int bkmap_learn_rows(struct bkmap *m, struct rp *p, const char *prefix, const void *rows, size_t n,
                     int64_t (*item_of)(const void *rows, size_t i))
{
    int64_t items[BKMAP_ASK_MAX];
    size_t k = 0;
    int ret = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n) {
            int64_t item = item_of(rows, i);
            if (k == 0 || items[k - 1] != item) /* (sorted by item: a new one) */
                items[k++] = item;
        }
        if (k == BKMAP_ASK_MAX || (i == n && k > 0)) {
            if (bkmap_learn(m, p, prefix, items, k) != 0)
                ret = -1;
            k = 0;
        }
    }
    return ret;
}

void bkmap_forget(struct bkmap *m, int64_t item)
{
    struct bk_entry *e = i64map_get(&m->items, &item);
    if (e)
        e->learned_ms = 0;
}

bool bkmap_get(const struct bkmap *m, int64_t item, int *k, int salts[BUCKET_MAX])
{
    const struct bk_entry *e = i64map_get(&m->items, &item);
    if (!e)
        return false;
    *k = e->k;
    memcpy(salts, e->salts, sizeof(e->salts));
    return true;
}

int bkmap_salt(const struct bkmap *m, int64_t item, int64_t user)
{
    const struct bk_entry *e = i64map_get(&m->items, &item);
    if (!e || e->k <= 1)
        return BUCKET_HOME;
    return e->salts[bucket_of(user, e->k)];
}
