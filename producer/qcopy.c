#include "qcopy.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "i64map.h"
#include "pmetrics.h"

struct qc_line {
    struct i64map at; /* user -> place */
    int64_t *places;  /* ascending */
    size_t n, cap;
};

struct qc_item {
    int64_t id;
    struct qc_state s;
    int64_t fresh_ms;      /* when s came (monotonic) */
    struct qc_line *line;  /* NULL until the whole line is here */
};

struct qcopy {
    pthread_rwlock_t lock; /* items */
    struct qc_item *items; /* sorted by id */
    size_t n, cap;
    pthread_mutex_t seen_mu; /* seen */
    struct qc_seen *seen;
    size_t nseen, seen_cap;
};

/* --- a line ----------------------------------------------------------------- */

struct qc_line *qc_line_new(void)
{
    struct qc_line *l = calloc(1, sizeof(*l));
    if (l)
        i64map_init(&l->at, 1, sizeof(int64_t));
    return l;
}

void qc_line_free(struct qc_line *l)
{
    if (!l)
        return;
    i64map_free(&l->at);
    free(l->places);
    free(l);
}

int qc_line_add(struct qc_line *l, int64_t user, int64_t place)
{
    if (l->n && place < l->places[l->n - 1])
        return -1;
    if (i64map_has(&l->at, &user))
        return 1;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 4096;
        int64_t *p = realloc(l->places, cap * sizeof(*p));
        if (!p)
            return -1;
        l->places = p;
        l->cap = cap;
    }
    int64_t *v = i64map_put(&l->at, &user);
    if (!v)
        return -1;
    *v = place;
    l->places[l->n++] = place;
    return 0;
}

int64_t qc_line_last(const struct qc_line *l)
{
    return l->n ? l->places[l->n - 1] : -1;
}

size_t qc_line_size(const struct qc_line *l)
{
    return l->n;
}

/* How many places are at or before place: ZCOUNT -inf place. */
static size_t upto(const struct qc_line *l, int64_t place)
{
    size_t lo = 0, hi = l->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (l->places[mid] <= place)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* --- the items -------------------------------------------------------------- */

int qc_new(struct qcopy **out, char *err, size_t errlen)
{
    struct qcopy *v = calloc(1, sizeof(*v));
    if (!v) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    pthread_rwlock_init(&v->lock, NULL);
    pthread_mutex_init(&v->seen_mu, NULL);
    *out = v;
    return 0;
}

void qc_free(struct qcopy *v)
{
    if (!v)
        return;
    for (size_t i = 0; i < v->n; i++)
        qc_line_free(v->items[i].line);
    free(v->items);
    free(v->seen);
    pthread_rwlock_destroy(&v->lock);
    pthread_mutex_destroy(&v->seen_mu);
    free(v);
}

/* Where item is, or would go, in the sorted items. */
static size_t slot_of(const struct qcopy *v, int64_t item)
{
    size_t lo = 0, hi = v->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v->items[mid].id < item)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static struct qc_item *find(const struct qcopy *v, int64_t item)
{
    size_t i = slot_of(v, item);
    return i < v->n && v->items[i].id == item ? &v->items[i] : NULL;
}

int qc_step(struct qcopy *v, int64_t item, const struct qc_state *s, int64_t now_mono_ms)
{
    struct qc_line *old = NULL;
    int ret = 0;
    pthread_rwlock_wrlock(&v->lock);
    size_t i = slot_of(v, item);
    if (i == v->n || v->items[i].id != item) {
        if (v->n == v->cap) {
            size_t cap = v->cap ? 2 * v->cap : 16;
            struct qc_item *p = realloc(v->items, cap * sizeof(*p));
            if (!p) {
                ret = -1;
                goto out;
            }
            v->items = p;
            v->cap = cap;
        }
        memmove(&v->items[i + 1], &v->items[i], (v->n - i) * sizeof(*v->items));
        v->n++;
        v->items[i] = (struct qc_item){ .id = item };
    }
    struct qc_item *it = &v->items[i];
    if (it->s.starts_ms != s->starts_ms || it->s.seed_id != s->seed_id || !s->placed) {
        old = it->line;
        it->line = NULL;
    }
    it->s = *s;
    it->fresh_ms = now_mono_ms;
out:
    pthread_rwlock_unlock(&v->lock);
    qc_line_free(old);
    return ret;
}

int qc_has_line(struct qcopy *v, int64_t item, uint64_t seed_id)
{
    pthread_rwlock_rdlock(&v->lock);
    const struct qc_item *it = find(v, item);
    int has = it && it->line && it->s.seed_id == seed_id;
    pthread_rwlock_unlock(&v->lock);
    return has;
}

void qc_set_line(struct qcopy *v, int64_t item, uint64_t seed_id, struct qc_line *l)
{
    pthread_rwlock_wrlock(&v->lock);
    struct qc_item *it = find(v, item);
    if (it && it->s.placed && it->s.seed_id == seed_id) {
        struct qc_line *old = it->line;
        it->line = l;
        l = old;
    }
    pthread_rwlock_unlock(&v->lock);
    qc_line_free(l);
}

void qc_forget(struct qcopy *v, int64_t item)
{
    struct qc_line *old = NULL;
    pthread_rwlock_wrlock(&v->lock);
    size_t i = slot_of(v, item);
    if (i < v->n && v->items[i].id == item) {
        old = v->items[i].line;
        memmove(&v->items[i], &v->items[i + 1], (v->n - i - 1) * sizeof(*v->items));
        v->n--;
    }
    pthread_rwlock_unlock(&v->lock);
    qc_line_free(old);
}

/* --- the asks ----------------------------------------------------------------- */

size_t qc_take_seen(struct qcopy *v, struct qc_seen **buf, size_t *cap)
{
    pthread_mutex_lock(&v->seen_mu);
    struct qc_seen *mine = *buf;
    size_t n = v->nseen, mycap = *cap;
    *buf = v->seen;
    *cap = v->seen_cap;
    v->seen = mine;
    v->seen_cap = mycap;
    v->nseen = 0;
    pthread_mutex_unlock(&v->seen_mu);
    return n;
}

static int seen_add(struct qcopy *v, const struct qc_seen *s)
{
    int ret = 0;
    pthread_mutex_lock(&v->seen_mu);
    if (v->nseen == v->seen_cap) {
        size_t cap = v->seen_cap ? 2 * v->seen_cap : 1024;
        struct qc_seen *p = cap > QC_SEEN_MAX ? NULL : realloc(v->seen, cap * sizeof(*p));
        if (!p) {
            ret = -1;
            goto out;
        }
        v->seen = p;
        v->seen_cap = cap;
    }
    v->seen[v->nseen++] = *s;
out:
    pthread_mutex_unlock(&v->seen_mu);
    return ret;
}

/* Whether the copy may answer for it now (qcopy.h: what it knows). */
static int answerable(const struct qc_item *it, int64_t now_mono_ms, int64_t now_wall_ms)
{
    const struct qc_state *s = &it->s;
    int open = now_wall_ms >= s->starts_ms && (!s->ends_ms || now_wall_ms < s->ends_ms);
    int fresh = now_mono_ms - it->fresh_ms <= QC_FRESH_MS;
    /* (A line is there only while its opening is placed: qc_step.) */
    return it->line && fresh && open && s->stock > s->outstanding;
}

int qc_ask(struct qcopy *v, int64_t item, int64_t user, int64_t now_mono_ms, int64_t now_wall_ms,
           struct qc_answer *a)
{
    int ok = 0;
    pthread_rwlock_rdlock(&v->lock);
    const struct qc_item *it = find(v, item);
    const int64_t *at;
    if (it && answerable(it, now_mono_ms, now_wall_ms) && (at = i64map_get(&it->line->at, &user)) != NULL &&
        *at > it->s.called) {
        a->position = (int64_t)(upto(it->line, *at) - upto(it->line, it->s.called));
        a->eta_ms = it->s.rate_milli > 0 ? a->position * 1000000 / it->s.rate_milli : -1;
        a->starts_ms = it->s.starts_ms;
        a->callable = it->s.callable;
        ok = 1;
    }
    pthread_rwlock_unlock(&v->lock);
    if (!ok)
        return 0;
    struct qc_seen s = { item, user, now_wall_ms, a->eta_ms >= 0 ? now_wall_ms + a->eta_ms : 0 };
    if (seen_add(v, &s) != 0)
        return 0;
    PM_INC(queue_asks_local);
    return 1;
}
