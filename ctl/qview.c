#include "qview.h"

#include <stdio.h>
#include <string.h>

#include "keys.h"
#include "util.h"

int qview_add(struct rp_batch *b, const char *prefix, int64_t item)
{
    char q[KEYS_QUEUE_PARTS][KEYS_MAX], k[KEYS_ITEM_PARTS][KEYS_MAX];
    int n = b->n;
    if (keys_queue_all(q, prefix, item) != 0 || keys_item_all(k, prefix, item) != 0)
        return -1;
    /* qview_take reads them in this order. */
    if (rp_addf(b, q[0], "HGETALL %s", q[KEYS_QUEUE_META]) < 0 ||
        rp_addf(b, q[0], "SCARD %s", q[KEYS_QUEUE_PRE]) < 0 ||
        rp_addf(b, q[0], "ZCARD %s", q[KEYS_QUEUE_LINE]) < 0 ||
        rp_addf(b, q[0], "ZCARD %s", q[KEYS_QUEUE_ADM]) < 0 ||
        rp_addf(b, q[0], "ZCARD %s", q[KEYS_QUEUE_USED]) < 0 ||
        rp_addf(b, q[0], "HGETALL %s", k[KEYS_ITEM_WINDOW]) < 0 ||
        rp_addf(b, q[0], "GET %s", k[KEYS_ITEM_STOCK]) < 0 ||
        rp_addf(b, q[0], "HLEN %s", k[KEYS_ITEM_PENDING]) < 0)
        return -1;
    return b->n - n == QVIEW_CMDS ? 0 : -1;
}

/* The value of field in an HGETALL reply, or NULL. */
static const char *field_of(const redisReply *r, const char *field)
{
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2)
        if (r->element[i]->type == REDIS_REPLY_STRING && strcmp(r->element[i]->str, field) == 0 &&
            r->element[i + 1]->type == REDIS_REPLY_STRING)
            return r->element[i + 1]->str;
    return NULL;
}

/* A field of an HGETALL reply as a number; 0 when absent or not one. */
static int64_t field_i64(const redisReply *r, const char *field)
{
    int64_t v = 0;
    const char *s = field_of(r, field);
    if (!s || util_parse_i64(s, INT64_MIN, INT64_MAX, &v) != 0)
        return 0;
    return v;
}

static int64_t int_of(const redisReply *r)
{
    return r->type == REDIS_REPLY_INTEGER ? (int64_t)r->integer : 0;
}

int qview_take(const struct rp_batch *b, int first, struct qview *out)
{
    const redisReply *r[QVIEW_CMDS];
    memset(out, 0, sizeof(*out));
    for (int i = 0; i < QVIEW_CMDS; i++)
        if (!(r[i] = rp_reply(b, first + i)) || r[i]->type == REDIS_REPLY_ERROR)
            return -1;
    const redisReply *m = r[0], *w = r[5];
    out->opens_ms = field_i64(w, KEYS_WINDOW_QUEUE);
    out->starts_ms = field_i64(w, "starts_ms");
    out->opened_ms = field_i64(m, "opened_ms");
    snprintf(out->seed, sizeof(out->seed), "%s", field_of(m, "seed") ? field_of(m, "seed") : "");
    out->joined_total = field_i64(m, "joined_total");
    out->pre_now = int_of(r[1]);
    out->pre_total = field_i64(m, "pre_total");
    out->late_seq = field_i64(m, "late_seq");
    out->line = int_of(r[2]);
    out->serving = field_i64(m, "serving");
    out->admitted_total = field_i64(m, "admitted_total");
    out->passed_total = field_i64(m, "passed_total");
    out->waiting = field_i64(m, "waiting");
    out->outstanding = int_of(r[3]);
    out->spent = int_of(r[4]);
    out->stock = -1;
    if (r[6]->type == REDIS_REPLY_STRING && util_parse_i64(r[6]->str, INT64_MIN, INT64_MAX, &out->stock) != 0)
        out->stock = -1;
    out->pending = int_of(r[7]);
    out->rate_milli = field_i64(m, "rate_milli");
    out->ceiling_per_s = field_i64(m, "ceiling_per_s");
    out->paused = field_i64(m, "paused") != 0;
    snprintf(out->lease, sizeof(out->lease), "%s", field_of(m, "lease") ? field_of(m, "lease") : "");
    return 0;
}
