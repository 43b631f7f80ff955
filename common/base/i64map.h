/* i64map: open-addressing hash tables keyed by int64 ids, and the one hash
 * mixer of the tree.
 *
 * A table's key is nkey int64 words (an id, or a pair of ids) whose first
 * word is never 0 (0 marks a free slot: ids are > 0); its value is vsize
 * bytes of the caller's (a struct, a counter), or none (vsize 0: a set).
 * Linear probing in a power-of-two table kept at most half full, so a probe
 * is short; entries are never removed one by one, only all at once
 * (i64map_reset).
 *
 * A table is one thread's, or guarded by its owner's lock. Pointers into it
 * (values, keys) last until the next i64map_put that adds an entry (the
 * table may grow and move them) or the next reset. */
#ifndef SECKILL_I64MAP_H
#define SECKILL_I64MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct i64map {
    int64_t *keys;       /* cap * nkey words; a first word of 0: free */
    unsigned char *vals; /* cap * vsize bytes */
    size_t cap, n;       /* slots (a power of two, or 0), entries */
    size_t nkey, vsize;
};

/* The hash of an nkey-word key: murmur3's 64-bit finalizer, folded over the
 * words from the last. Every bit of the key moves every bit of the hash, so
 * any bits of it (a mask, a modulo) spread sequential ids evenly. For the
 * tables that are not i64maps too: one mixer for the tree. */
uint64_t i64map_hash(const int64_t *key, size_t nkey);

/* An empty table of nkey-word keys (1 or more) and vsize-byte values, with
 * no memory yet. */
void i64map_init(struct i64map *m, size_t nkey, size_t vsize);
/* Empty the table, with room for n entries without growing: the memory is
 * kept when it is enough. 0, or -1 out of memory (the table is then empty,
 * with no memory). */
int i64map_reset(struct i64map *m, size_t n);
/* Empty the table, keeping its memory. */
void i64map_clear(struct i64map *m);
/* The value of key (vsize bytes; for a set, the stored key), or NULL when
 * absent. */
void *i64map_get(const struct i64map *m, const int64_t *key);
static inline bool i64map_has(const struct i64map *m, const int64_t *key)
{
    return i64map_get(m, key) != NULL;
}
/* The value of key, its entry added with a zeroed value when absent (for a
 * set, the stored key). The table grows when the entry would make it more
 * than half full: NULL only when that fails, never once i64map_reset made
 * room for this many entries. */
void *i64map_put(struct i64map *m, const int64_t *key);
/* Walk the entries, in no order: *pos starts at 0. The next entry's value
 * (for a set, its key) and its key in *key, or NULL after the last. */
void *i64map_next(const struct i64map *m, size_t *pos, const int64_t **key);
void i64map_free(struct i64map *m);

#endif
