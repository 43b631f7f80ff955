#include "qfeed.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"
#include "util.h"

/* A number, or "at_ms:eta_at_ms", as text: room enough. */
#define TXT 48

int qf_init(struct qfeed *f, struct qcopy *v, const char *prefix)
{
    memset(f, 0, sizeof(*f));
    f->v = v;
    f->prefix = prefix;
    f->txt = calloc(2 * QF_SEEN_PAGE, TXT);
    f->argv = calloc(2 * QF_SEEN_PAGE + 2, sizeof(*f->argv));
    return f->txt && f->argv ? 0 : -1;
}

void qf_free(struct qfeed *f)
{
    free(f->seen);
    free(f->txt);
    free(f->argv);
    memset(f, 0, sizeof(*f));
}

/* --- the asks answered, written back ------------------------------------------- */

static int by_item(const void *a, const void *b)
{
    const struct qc_seen *x = a, *y = b;
    if (x->item != y->item)
        return x->item < y->item ? -1 : 1;
    return x->at_ms < y->at_ms ? -1 : x->at_ms > y->at_ms;
}

/* One HSET of the records s[0..n), all of one item. */
static int add_page(struct qfeed *f, struct rp_batch *b, const struct qc_seen *s, size_t n)
{
    char key[KEYS_MAX];
    if (keys_queue(key, sizeof(key), f->prefix, s[0].item, KEYS_QUEUE_SEEN) < 0)
        return -1;
    f->argv[0] = "HSET";
    f->argv[1] = key;
    for (size_t i = 0; i < n; i++) {
        char *user = f->txt + 2 * i * TXT, *val = user + TXT;
        snprintf(user, TXT, "%" PRId64, s[i].user);
        snprintf(val, TXT, "%" PRId64 ":%" PRId64, s[i].at_ms, s[i].eta_at_ms);
        f->argv[2 + 2 * i] = user;
        f->argv[3 + 2 * i] = val;
    }
    return rp_add(b, key, (int)(2 + 2 * n), f->argv, NULL) < 0 ? -1 : 0;
}

int qf_seen_add(struct qfeed *f, struct rp_batch *b)
{
    f->first = b->n;
    f->n = 0;
    f->whole = 1;
    if (f->nseen == 0)
        f->nseen = qc_take_seen(f->v, &f->seen, &f->cap);
    if (f->nseen == 0)
        return 0;
    qsort(f->seen, f->nseen, sizeof(*f->seen), by_item);
    for (size_t i = 0; i < f->nseen;) {
        size_t n = 1;
        while (i + n < f->nseen && n < QF_SEEN_PAGE && f->seen[i + n].item == f->seen[i].item)
            n++;
        if (add_page(f, b, &f->seen[i], n) != 0) {
            f->whole = 0; /* what was added is run; all are written again next time */
            return -1;
        }
        f->n++;
        i += n;
    }
    return 0;
}

void qf_seen_ran(struct qfeed *f, const struct rp_batch *b)
{
    for (int i = 0; i < f->n; i++) {
        const redisReply *r = rp_reply(b, f->first + i);
        if (!r || r->type != REDIS_REPLY_INTEGER)
            return; /* kept: written again (each HSET says the same) */
    }
    if (f->n && f->whole)
        f->nseen = 0;
}

/* --- the state ---------------------------------------------------------------------- */

int qf_meta_add(const struct qfeed *f, struct rp_batch *b, int64_t item)
{
    char key[KEYS_MAX];
    if (keys_queue(key, sizeof(key), f->prefix, item, KEYS_QUEUE_META) < 0)
        return -1;
    return rp_addf(b, key, "HMGET %s called rate_milli seed", key) < 0 ? -1 : 0;
}

/* FNV-1a of the seed: which opening, not a secret (never 0: 0 is none). */
static uint64_t seed_id(const char *seed)
{
    uint64_t h = 14695981039346656037ULL;
    for (const unsigned char *p = (const unsigned char *)seed; *p; p++)
        h = (h ^ *p) * 1099511628211ULL;
    return h ? h : 1;
}

void qf_meta(const redisReply *r, struct qc_state *s)
{
    s->called = -1;
    s->rate_milli = 0;
    s->seed_id = 0;
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 3)
        return;
    const redisReply *called = r->element[0], *rate = r->element[1], *seed = r->element[2];
    if (called->type == REDIS_REPLY_STRING && util_parse_i64(called->str, -1, INT64_MAX, &s->called) != 0)
        s->called = INT64_MAX; /* unreadable: the copy answers no one (no place is past it) */
    if (rate->type == REDIS_REPLY_STRING && util_parse_i64(rate->str, 0, INT64_MAX, &s->rate_milli) != 0)
        s->rate_milli = 0;
    if (seed->type == REDIS_REPLY_STRING)
        s->seed_id = seed_id(seed->str);
}

/* --- the line ---------------------------------------------------------------------------- */

void qf_read_drop(struct qf_read *rd)
{
    qc_line_free(rd->line);
    rd->line = NULL;
    rd->seed_id = 0;
}

/* The next page of the line's pre-queue part from the last place read (again:
 * the pages overlap by it, so places that tie are all read). 1 the line is
 * whole, 0 more to read, -1 failed (read again from the start). */
static int read_page(struct qfeed *f, struct rlink *l, struct qf_read *rd, int64_t item)
{
    char key[KEYS_MAX], from[24], to[24], page[16];
    if (keys_queue(key, sizeof(key), f->prefix, item, KEYS_QUEUE_LINE) < 0)
        return -1;
    if (qc_line_size(rd->line))
        snprintf(from, sizeof(from), "%" PRId64, qc_line_last(rd->line));
    else
        snprintf(from, sizeof(from), "-inf");
    snprintf(to, sizeof(to), "(%lld", KEYS_QUEUE_LATE);
    snprintf(page, sizeof(page), "%d", QF_LINE_PAGE);
    const char *argv[] = { "ZRANGEBYSCORE", key, from, to, "WITHSCORES", "LIMIT", "0", page };
    redisReply *r = rlink_call(l, key, 8, argv);
    int ret = -1, added = 0;
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements % 2)
        goto out;
    for (size_t i = 0; i < r->elements; i += 2) {
        int64_t user, place;
        const redisReply *u = r->element[i], *p = r->element[i + 1];
        if (u->type != REDIS_REPLY_STRING || p->type != REDIS_REPLY_STRING ||
            util_parse_i64(u->str, 1, INT64_MAX, &user) != 0 ||
            util_parse_i64(p->str, 0, KEYS_QUEUE_LATE - 1, &place) != 0)
            goto out;
        int a = qc_line_add(rd->line, user, place);
        if (a < 0)
            goto out;
        added += a == 0;
    }
    if (r->elements / 2 < QF_LINE_PAGE)
        ret = 1;
    else
        ret = added ? 0 : -1; /* a whole page tied on one place: not for the copy */
out:
    freeReplyObject(r);
    return ret;
}

void qf_step(struct qfeed *f, struct rlink *l, struct qf_read *rd, int64_t item, const struct qc_state *s,
             int64_t now_mono_ms)
{
    if (qc_step(f->v, item, s, now_mono_ms) != 0 || !s->placed || !s->seed_id ||
        qc_has_line(f->v, item, s->seed_id))
        return;
    if (rd->line && rd->seed_id != s->seed_id)
        qf_read_drop(rd);
    if (!rd->line && !(rd->line = qc_line_new()))
        return;
    rd->seed_id = s->seed_id;
    for (int i = 0; i < QF_LINE_PAGES; i++) {
        int r = read_page(f, l, rd, item);
        if (r < 0) {
            qf_read_drop(rd);
            return;
        }
        if (r == 1) {
            qc_set_line(f->v, item, rd->seed_id, rd->line);
            rd->line = NULL;
            return;
        }
    }
}
