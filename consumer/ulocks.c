#include "ulocks.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "cmetrics.h"

int ul_init(struct ul_batch *b, const struct cfg *c, size_t cap, int slot)
{
    *b = (struct ul_batch){ .cfg = c, .slot = slot, .cap = cap };
    b->names = calloc(cap, sizeof(*b->names));
    b->namep = calloc(cap, sizeof(*b->namep));
    b->locks = calloc(cap, sizeof(*b->locks));
    b->status = calloc(cap, sizeof(*b->status));
    return b->names && b->namep && b->locks && b->status ? 0 : -1;
}

void ul_free(struct ul_batch *b)
{
    if (b->lc)
        lock_client_close(b->lc);
    free(b->names);
    free(b->namep);
    free(b->locks);
    free(b->status);
    *b = (struct ul_batch){ 0 };
}

int ul_connect(struct ul_batch *b, char *err, size_t errlen)
{
    if (b->lc)
        return 0;
    if (lock_client_open(b->cfg, &b->lc, err, errlen) == 0)
        return 0;
    b->lc = NULL;
    return -1;
}

void ul_count(const int *status, size_t n, struct ul_tally *t)
{
    *t = (struct ul_tally){ 0 };
    for (size_t i = 0; i < n; i++) {
        t->got += status[i] == LOCK_OK;
        t->busy += status[i] == LOCK_BUSY;
        t->errors += status[i] == LOCK_ERROR;
    }
}

size_t ul_lock(struct ul_batch *b, const int64_t *users, size_t n, struct ul_tally *t)
{
    b->n = n;
    for (size_t i = 0; i < n; i++) {
        /* Never too long: KEYS_USER_LOCK_MAX holds any id. */
        keys_user_lock(b->names[i], sizeof(b->names[i]), users[i]);
        b->namep[i] = b->names[i];
        b->status[i] = LOCK_ERROR;
    }
    if (b->lc && n > 0)
        lock_acquire_many(b->lc, b->namep, n, CFG_GET(b->cfg->lock.wait_ms), b->locks, b->status);
    ul_count(b->status, n, t);
    return t->got;
}

bool ul_held(const struct ul_batch *b, size_t i)
{
    return i < b->n && b->status[i] == LOCK_OK;
}

int64_t ul_fence(const struct ul_batch *b, size_t i)
{
    return lock_fence(b->locks[i]);
}

bool ul_any_lost(const struct ul_batch *b)
{
    for (size_t i = 0; i < b->n; i++)
        if (b->status[i] == LOCK_OK && b->locks[i] && lock_lost(b->locks[i]))
            return true;
    return false;
}

size_t ul_held_first(struct lock **locks, const int *status, size_t n)
{
    size_t nh = 0;
    for (size_t i = 0; i < n; i++)
        if (status[i] == LOCK_OK)
            locks[nh++] = locks[i];
    return nh;
}

void ul_release(struct ul_batch *b)
{
    size_t nh = ul_held_first(b->locks, b->status, b->n);
    b->n = 0;
    if (nh > 0)
        lock_release_many(b->lc, b->locks, nh, b->status);
}

void ul_publish(const struct ul_batch *b)
{
    struct lock_counters lcnt;
    if (!b->lc || b->slot < 0 || b->slot >= CM_MAX_WORKERS)
        return;
    lock_client_counters(b->lc, &lcnt);
#define CM_X(m, name, help) atomic_store_explicit(&cm.lock[b->slot].m, lcnt.m, memory_order_relaxed);
    CM_LOCK_COUNTERS(CM_X)
#undef CM_X
}
