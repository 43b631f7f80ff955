#include "i64map.h"

#include <stdlib.h>
#include <string.h>

/* The smallest table: a few cache lines, so tiny tables do not resize at once. */
#define I64MAP_MIN_CAP 16

static uint64_t fmix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

uint64_t i64map_hash(const int64_t *key, size_t nkey)
{
    uint64_t h = 0;
    for (size_t i = nkey; i-- > 0;)
        h = fmix64((uint64_t)key[i] ^ h);
    return h;
}

void i64map_init(struct i64map *m, size_t nkey, size_t vsize)
{
    *m = (struct i64map){ .nkey = nkey, .vsize = vsize };
}

void i64map_free(struct i64map *m)
{
    free(m->keys);
    free(m->vals);
    m->keys = NULL;
    m->vals = NULL;
    m->cap = m->n = 0;
}

static int64_t *key_at(const struct i64map *m, size_t i)
{
    return m->keys + i * m->nkey;
}

static void *value_at(const struct i64map *m, size_t i)
{
    return m->vsize ? (void *)(m->vals + i * m->vsize) : (void *)key_at(m, i);
}

/* The slot of key, or the free slot where it would go (the table has one:
 * it is at most half full). */
static size_t slot_of(const struct i64map *m, const int64_t *key)
{
    size_t mask = m->cap - 1, i = (size_t)i64map_hash(key, m->nkey) & mask;
    while (key_at(m, i)[0] != 0 && memcmp(key_at(m, i), key, m->nkey * sizeof(*key)) != 0)
        i = (i + 1) & mask;
    return i;
}

/* Fresh arrays of cap slots, all free. 0 or -1. */
static int alloc_slots(struct i64map *m, size_t cap)
{
    m->keys = calloc(cap, m->nkey * sizeof(*m->keys));
    m->vals = m->vsize ? malloc(cap * m->vsize) : NULL;
    if (!m->keys || (m->vsize && !m->vals)) {
        i64map_free(m);
        return -1;
    }
    m->cap = cap;
    m->n = 0;
    return 0;
}

static size_t cap_for(size_t n)
{
    size_t cap = I64MAP_MIN_CAP;
    while (cap < n * 2)
        cap *= 2;
    return cap;
}

int i64map_reset(struct i64map *m, size_t n)
{
    size_t cap;
    if (n > SIZE_MAX / 4 / (m->nkey * sizeof(int64_t) + m->vsize))
        return -1;
    cap = cap_for(n);
    if (cap > m->cap) {
        i64map_free(m);
        return alloc_slots(m, cap);
    }
    /* Only the keys say what is used; a value is zeroed when its entry is added. */
    i64map_clear(m);
    return 0;
}

void i64map_clear(struct i64map *m)
{
    if (m->cap)
        memset(m->keys, 0, m->cap * m->nkey * sizeof(*m->keys));
    m->n = 0;
}

/* Move every entry into a table twice the size. 0 or -1 (m unchanged). */
static int grow(struct i64map *m)
{
    struct i64map old = *m;
    if (alloc_slots(m, old.cap ? old.cap * 2 : I64MAP_MIN_CAP) != 0) {
        *m = old;
        return -1;
    }
    for (size_t i = 0; i < old.cap; i++) {
        if (key_at(&old, i)[0] == 0)
            continue;
        size_t j = slot_of(m, key_at(&old, i));
        memcpy(key_at(m, j), key_at(&old, i), m->nkey * sizeof(int64_t));
        if (m->vsize)
            memcpy(value_at(m, j), value_at(&old, i), m->vsize);
        m->n++;
    }
    i64map_free(&old);
    return 0;
}

void *i64map_get(const struct i64map *m, const int64_t *key)
{
    size_t i;
    if (m->cap == 0)
        return NULL;
    i = slot_of(m, key);
    return key_at(m, i)[0] != 0 ? value_at(m, i) : NULL;
}

void *i64map_put(struct i64map *m, const int64_t *key)
{
    size_t i;
    if (m->cap != 0) {
        i = slot_of(m, key);
        if (key_at(m, i)[0] != 0)
            return value_at(m, i);
    }
    if ((m->n + 1) * 2 > m->cap) {
        if (grow(m) != 0)
            return NULL;
    }
    i = slot_of(m, key);
    memcpy(key_at(m, i), key, m->nkey * sizeof(*key));
    if (m->vsize)
        memset(value_at(m, i), 0, m->vsize);
    m->n++;
    return value_at(m, i);
}

void *i64map_next(const struct i64map *m, size_t *pos, const int64_t **key)
{
    for (; *pos < m->cap; (*pos)++) {
        size_t i = *pos;
        if (key_at(m, i)[0] != 0) {
            (*pos)++;
            if (key)
                *key = key_at(m, i);
            return value_at(m, i);
        }
    }
    return NULL;
}
