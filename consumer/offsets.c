#include "offsets.h"

#include <stdlib.h>
#include <string.h>

/* One partition: a ring of in-flight offsets with their done flags. */
struct off_part {
    bool assigned;
    uint32_t epoch;
    int64_t *offs;
    bool *done;
    size_t head, len, cap;
    int64_t next;     /* the watermark: next offset to store once nothing below is open */
    int64_t reported; /* last watermark handed out by off_advance */
};

struct off_table {
    struct off_part *parts;
    int32_t nparts;
    size_t pending;
};

int off_open(struct off_table **out)
{
    *out = calloc(1, sizeof(**out));
    return *out ? 0 : -1;
}

void off_close(struct off_table *t)
{
    if (!t)
        return;
    for (int32_t i = 0; i < t->nparts; i++) {
        free(t->parts[i].offs);
        free(t->parts[i].done);
    }
    free(t->parts);
    free(t);
}

static struct off_part *part(const struct off_table *t, int32_t p)
{
    return p >= 0 && p < t->nparts ? &t->parts[p] : NULL;
}

int off_assign(struct off_table *t, int32_t p, uint32_t *epoch)
{
    if (p < 0)
        return -1;
    if (p >= t->nparts) {
        int32_t n = p + 1;
        struct off_part *np = realloc(t->parts, (size_t)n * sizeof(*np));
        if (!np)
            return -1;
        memset(np + t->nparts, 0, (size_t)(n - t->nparts) * sizeof(*np));
        t->parts = np;
        t->nparts = n;
    }
    struct off_part *pp = &t->parts[p];
    t->pending -= pp->len;
    pp->assigned = true;
    pp->epoch++;
    pp->head = pp->len = 0;
    pp->next = pp->reported = -1;
    *epoch = pp->epoch;
    return 0;
}

void off_revoke(struct off_table *t, int32_t p)
{
    struct off_part *pp = part(t, p);
    if (!pp)
        return;
    t->pending -= pp->len;
    pp->assigned = false;
    pp->epoch++;
    pp->head = pp->len = 0;
}

bool off_assigned(const struct off_table *t, int32_t p)
{
    const struct off_part *pp = part(t, p);
    return pp && pp->assigned;
}

int off_track(struct off_table *t, int32_t p, int64_t offset, uint32_t *epoch)
{
    struct off_part *pp = part(t, p);
    if (!pp || !pp->assigned)
        return -1;
    if (pp->len == pp->cap) {
        size_t cap = pp->cap ? pp->cap * 2 : 1024;
        int64_t *o = malloc(cap * sizeof(*o));
        bool *d = malloc(cap * sizeof(*d));
        if (!o || !d) {
            free(o);
            free(d);
            return -1;
        }
        for (size_t i = 0; i < pp->len; i++) {
            o[i] = pp->offs[(pp->head + i) % pp->cap];
            d[i] = pp->done[(pp->head + i) % pp->cap];
        }
        free(pp->offs);
        free(pp->done);
        pp->offs = o;
        pp->done = d;
        pp->cap = cap;
        pp->head = 0;
    }
    size_t at = (pp->head + pp->len) % pp->cap;
    pp->offs[at] = offset;
    pp->done[at] = false;
    pp->len++;
    t->pending++;
    *epoch = pp->epoch;
    return 0;
}

int off_done(struct off_table *t, int32_t p, uint32_t epoch, int64_t offset)
{
    struct off_part *pp = part(t, p);
    if (!pp || !pp->assigned || pp->epoch != epoch || pp->len == 0)
        return 1;
    /* Offsets in the ring increase: binary search. */
    size_t lo = 0, hi = pp->len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (pp->offs[(pp->head + mid) % pp->cap] < offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == pp->len || pp->offs[(pp->head + lo) % pp->cap] != offset)
        return 1;
    pp->done[(pp->head + lo) % pp->cap] = true;
    /* Slide the watermark over the settled prefix. */
    while (pp->len > 0 && pp->done[pp->head]) {
        pp->next = pp->offs[pp->head] + 1;
        pp->head = (pp->head + 1) % pp->cap;
        pp->len--;
        t->pending--;
    }
    return 0;
}

int off_advance(struct off_table *t, int32_t p, int64_t *next)
{
    struct off_part *pp = part(t, p);
    if (!pp || !pp->assigned || pp->next < 0 || pp->next == pp->reported)
        return 0;
    pp->reported = pp->next;
    *next = pp->next;
    return 1;
}

size_t off_inflight(const struct off_table *t, int32_t p)
{
    const struct off_part *pp = part(t, p);
    return pp && pp->assigned ? pp->len : 0;
}

size_t off_pending(const struct off_table *t) { return t->pending; }

int32_t off_partitions(const struct off_table *t) { return t->nparts; }
