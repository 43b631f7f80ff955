#include "rstate.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "funclibs.h"
#include "keys.h"
#include "util.h"

/* seckill_mark's arguments per order: id, state, detail. */
#define RS_ARGS 3

void rs_init(struct rs *w, const struct cfg *c)
{
    memset(w, 0, sizeof(*w));
    w->cfg = c;
    w->mark_fn = (struct rfunc)RFUNC_INIT("seckill_mark", &funclib_return);
}

void rs_free(struct rs *w)
{
    free(w->rows);
    free(w->order);
    free(w->calls);
    free(w->answered);
    free(w->done);
    free(w->argv);
    free(w->vals);
    memset(w, 0, sizeof(*w));
}

void rs_begin(struct rs *w)
{
    w->nrows = 0;
    w->ncalls = 0;
}

int rs_put(struct rs *w, const struct rs_row *row)
{
    if (row->state < 0 || row->state >= OST_NSTATES || ost_writer(row->state) != OST_BY_MARK)
        return -1;
    if (w->nrows == w->caprows) {
        size_t cap = w->caprows ? 2 * w->caprows : 64;
        struct rs_row *r = realloc(w->rows, cap * sizeof(*r));
        if (r)
            w->rows = r;
        struct rs_row **o = realloc(w->order, cap * sizeof(*o));
        if (o)
            w->order = o;
        if (!r || !o)
            return -1;
        w->caprows = cap;
    }
    w->rows[w->nrows++] = *row;
    return 0;
}

/* Room for a call of n orders, and for one more call. 0, or -1. */
static int call_room(struct rs *w, size_t n)
{
    if (n > w->capargs) {
        const char **argv = realloc(w->argv, (1 + RS_ARGS * n) * sizeof(*argv));
        if (argv)
            w->argv = argv;
        char(*vals)[24] = realloc(w->vals, RS_ARGS * n * sizeof(*vals));
        if (vals)
            w->vals = vals;
        if (!argv || !vals)
            return -1;
        w->capargs = n;
    }
    if (w->ncalls == w->capcalls) {
        int cap = w->capcalls ? 2 * w->capcalls : 16;
        int *calls = realloc(w->calls, (size_t)cap * sizeof(*calls));
        if (calls)
            w->calls = calls;
        bool *answered = realloc(w->answered, (size_t)cap * sizeof(*answered));
        if (answered)
            w->answered = answered;
        bool *done = realloc(w->done, (size_t)cap * sizeof(*done));
        if (done)
            w->done = done;
        if (!calls || !answered || !done)
            return -1;
        w->capcalls = cap;
    }
    return 0;
}

/* By item and slot, and in the order given within a slot (an order named
 * twice in a call moves from its first new state, seckill_return.lua). */
static int by_item(const void *a, const void *b)
{
    const struct rs_row *x = *(struct rs_row *const *)a, *y = *(struct rs_row *const *)b;
    if (x->item_id != y->item_id)
        return x->item_id < y->item_id ? -1 : 1;
    if (x->salt != y->salt)
        return x->salt < y->salt ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* The call of the n rows at r[] (one item's, in one slot) into b. 0, or -1. */
static int add_call(struct rs *w, struct rp_batch *b, struct rs_row *const *r, size_t n)
{
    char key[KEYS_MAX];
    size_t a = 0;
    const char *prefix = w->cfg->redis.key_prefix;
    if (call_room(w, n) != 0 ||
        keys_item_at(key, sizeof(key), prefix, r[0]->item_id, r[0]->salt, KEYS_ITEM_ORDERS) < 0)
        return -1;
    w->argv[a++] = key;
    for (size_t i = 0; i < n; i++) {
        char(*v)[24] = &w->vals[RS_ARGS * i];
        util_i64_text(v[0], r[i]->order_id);
        v[1][0] = ost_letter(r[i]->state);
        v[1][1] = '\0';
        util_i64_text(v[2], r[i]->detail_ms);
        for (int k = 0; k < RS_ARGS; k++)
            w->argv[a++] = v[k];
    }
    int at = rp_fcall(b, w->mark_fn.name, 1, (int)(a - 1), w->argv, NULL);
    if (at < 0)
        return -1;
    w->calls[w->ncalls] = at;
    w->answered[w->ncalls] = false;
    w->done[w->ncalls++] = false;
    return 0;
}

int rs_add(struct rs *w, struct rp_batch *b)
{
    struct rs_row **r = w->order;
    size_t n = w->nrows;
    int added = 0;
    w->nrows = 0;
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        r[i] = &w->rows[i];
    qsort(r, n, sizeof(*r), by_item);
    for (size_t i = 0, j; i < n; i = j) {
        for (j = i + 1; j < n && r[j]->item_id == r[i]->item_id && r[j]->salt == r[i]->salt; j++)
            ;
        if (add_call(w, b, r + i, j - i) != 0)
            return -1;
        added++;
    }
    /* The buyers' states: a failover must not take one back (rpipe.h). */
    rp_durable(b);
    return added;
}

void rs_read(struct rs *w, const struct rp_batch *b, struct rs_said *said)
{
    *said = (struct rs_said){ .calls = w->ncalls, .replicas_short = rp_replicas_short(b) };
    for (int k = 0; k < w->ncalls; k++) {
        const redisReply *r = rp_reply(b, w->calls[k]);
        bool answered = rp_status(b, w->calls[k]) == RP_OK && r && r->type == REDIS_REPLY_INTEGER;
        said->missing += rp_classify(r) == RP_REPLY_NO_FUNCTION;
        if (r && r->type == REDIS_REPLY_ERROR && !said->why[0])
            snprintf(said->why, sizeof(said->why), "%s", r->str);
        w->answered[k] = answered;
        w->done[k] = answered && !said->replicas_short;
        said->answered += answered;
        said->done += w->done[k];
    }
}

bool rs_answered(const struct rs *w, int k) { return k >= 0 && k < w->ncalls && w->answered[k]; }
bool rs_done(const struct rs *w, int k) { return k >= 0 && k < w->ncalls && w->done[k]; }

void rs_missing_text(const struct rs *w, char *buf, size_t len) { rfunc_missing_text(&w->mark_fn, buf, len); }
