#include "watch.h"

#include <curl/curl.h>
#include <getopt.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bkmap.h"
#include "bucket.h"
#include "embed.h"
#include "keys.h"
#include "kmeta.h"
#include "pgconn.h"
#include "qview.h"
#include "rpipe.h"
#include "util.h"

#define WATCH_MAX_PICKED 64 /* --item given this many times at most */
#define WATCH_MAX_SHOWN 20  /* rows on the screen / items on a line; the total covers all */
#define WATCH_MAX_EPS 16    /* --producer / --consumer addresses */
#define WATCH_ERR 256

/* One of a bucketed item's slots at one refresh (bucket.h): the reserve
 * (salt BUCKET_HOME) or a bucket. -1: not known. */
struct wslot {
    int salt;
    int64_t stock, buyers, pending;
    int64_t xout, xin; /* transfers this slot gave, and received (xfer.h: their records) */
};

/* One item at one refresh. -1: not known (its engine did not answer, or
 * Redis has no stock loaded for it). */
struct witem {
    int64_t id;
    int64_t total, stock, accepted, pending, persisted, refused;
    /* After the sale (PostgreSQL): orders waiting for their payment, paid,
     * expired, cancelled; units given back to Redis and still waiting for it;
     * payments that came too late (0 before the table of late payments). */
    int64_t to_pay, paid, expired, cancelled, returned, ret_waiting, late;
    /* Its waiting room (qview.h; opens_ms 0: none, or not read): for the
     * items shown only. */
    struct qview q;
    /* An item in buckets: each slot, the reserve first (nslots 0: none). */
    int nslots;
    struct wslot slot[BUCKET_MAX + 1];
};

/* An item nothing is known of yet. */
#define WITEM_UNKNOWN(i)                                                                                     \
    (struct witem)                                                                                           \
    {                                                                                                        \
        .id = (i), .total = -1, .stock = -1, .accepted = -1, .pending = -1, .persisted = -1, .refused = -1,  \
        .to_pay = -1, .paid = -1, .expired = -1, .cancelled = -1, .returned = -1, .ret_waiting = -1,         \
        .late = -1                                                                                           \
    }

struct wep {
    const char *kind; /* "producer" or "consumer" */
    char addr[128];
    int code;           /* HTTP status; 0: no answer */
    char detail[160];   /* why not up: the dependencies /healthz named down, or curl's error */
};

/* Everything one refresh saw. */
struct wsample {
    int64_t mono_ms, wall_ms;
    struct witem *items;
    size_t n, cap;
    int32_t parts;
    int64_t *lo, *end, *committed; /* per partition; committed -1: nothing committed yet */
    char redis_err[WATCH_ERR], pg_err[WATCH_ERR], kafka_err[WATCH_ERR];
};

/* What the loop keeps between refreshes: connections, asked again when
 * broken. */
struct watch {
    const struct cfg *c;
    int64_t picked[WATCH_MAX_PICKED];
    size_t npicked;
    struct wep eps[WATCH_MAX_EPS];
    size_t neps;
    struct rp *rp; /* on a Redis Cluster each item's keys are read on its shard */
    struct bkmap *bk; /* the items' buckets: an item's units are over all its slots */
    PGconn *pg;
    rd_kafka_t *rk;
    CURL *curl;
    bool tty;
};

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

/* --- Redis ----------------------------------------------------------------- */

static struct witem *item_add(struct wsample *s, int64_t id)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        struct witem *v = realloc(s->items, cap * sizeof(*v));
        if (!v)
            return NULL;
        s->items = v;
        s->cap = cap;
    }
    struct witem *it = &s->items[s->n++];
    *it = WITEM_UNKNOWN(id);
    return it;
}

static int cmp_item(const void *a, const void *b)
{
    int64_t x = ((const struct witem *)a)->id, y = ((const struct witem *)b)->id;
    return (x > y) - (x < y);
}

/* The items to show: those picked with --item, else every item with a sale
 * loaded (the <prefix>:items set). Needs Redis for the latter. */
static int items_list(struct watch *w, struct wsample *s)
{
    if (w->npicked) {
        for (size_t i = 0; i < w->npicked; i++)
            if (!item_add(s, w->picked[i]))
                return -1;
    } else {
        char k[KEYS_MAX];
        if (keys_items(k, sizeof(k), w->c->redis.key_prefix) < 0)
            return -1;
        char err[WATCH_ERR];
        enum rp_status st;
        redisReply *r = rp_callf(w->rp, k, &st, err, sizeof(err), "SMEMBERS %s", k);
        if (!r || r->type != REDIS_REPLY_ARRAY) {
            snprintf(s->redis_err, sizeof(s->redis_err), "SMEMBERS: %.200s",
                     r && r->type == REDIS_REPLY_ERROR ? r->str : err);
            if (r)
                freeReplyObject(r);
            return -1;
        }
        for (size_t i = 0; i < r->elements; i++) {
            int64_t id;
            if (r->element[i]->type == REDIS_REPLY_STRING &&
                util_parse_i64(r->element[i]->str, 1, INT64_MAX, &id) == 0 && !item_add(s, id)) {
                freeReplyObject(r);
                return -1;
            }
        }
        freeReplyObject(r);
    }
    qsort(s->items, s->n, sizeof(*s->items), cmp_item);
    return 0;
}

static int64_t reply_i64(const redisReply *r)
{
    int64_t v;
    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r->type == REDIS_REPLY_STRING && util_parse_i64(r->str, INT64_MIN, INT64_MAX, &v) == 0)
        return v;
    return -1;
}

/* Where item i's counts start in the batch, over how many slots, and the
 * commands each slot has: its stock, pending and buyers; for an item in
 * buckets, also its transfers' records (given, received). */
struct wslots {
    int at, n, per;
    int salts[BUCKET_MAX + 1];
};

/* Item id's counts, over its slots: its own and each of its buckets
 * (bkmap.h). 0, or -1 (out of memory). */
static int slots_add(struct watch *w, struct rp_batch *b, int64_t id, struct wslots *ws)
{
    int k = 1;
    if (!w->bk || !bkmap_get(w->bk, id, &k, ws->salts + 1))
        k = 1;
    ws->at = b->n;
    ws->n = k > 1 ? 1 + k : 1;
    ws->per = k > 1 ? 5 : 3;
    ws->salts[0] = BUCKET_HOME;
    for (int i = 0; i < ws->n; i++) {
        char k_[KEYS_ITEM_PARTS][KEYS_MAX], xo[KEYS_MAX], xi[KEYS_MAX];
        const char *prefix = w->c->redis.key_prefix;
        if (keys_item_all_at(k_, prefix, id, ws->salts[i]) != 0 ||
            keys_item_at(xo, sizeof(xo), prefix, id, ws->salts[i], KEYS_ITEM_XOUT) < 0 ||
            keys_item_at(xi, sizeof(xi), prefix, id, ws->salts[i], KEYS_ITEM_XIN) < 0 ||
            rp_addf(b, k_[KEYS_ITEM_STOCK], "GET %s", k_[KEYS_ITEM_STOCK]) < 0 ||
            rp_addf(b, k_[KEYS_ITEM_STOCK], "HLEN %s", k_[KEYS_ITEM_PENDING]) < 0 ||
            rp_addf(b, k_[KEYS_ITEM_STOCK], "SCARD %s", k_[KEYS_ITEM_BUYERS]) < 0 ||
            (ws->per == 5 && (rp_addf(b, xo, "HLEN %s", xo) < 0 || rp_addf(b, xi, "HLEN %s", xi) < 0)))
            return -1;
    }
    return 0;
}

/* Item it's counts from its slots' replies, summed, and each slot's for an
 * item in buckets; a slot without stock (never loaded) counts none. 0, or
 * -1 for an error reply or none. */
static int slots_take(const struct rp_batch *b, const struct wslots *ws, struct witem *it)
{
    int64_t sum[3] = { 0, 0, 0 };
    bool any = false;
    for (int i = 0; i < ws->n; i++) {
        const redisReply *r[5] = { NULL };
        int64_t v[5] = { -1, -1, -1, -1, -1 };
        for (int j = 0; j < ws->per; j++)
            if (!(r[j] = rp_reply(b, ws->at + i * ws->per + j)) || r[j]->type == REDIS_REPLY_ERROR)
                return -1;
        for (int j = 0; j < ws->per && r[0]->type != REDIS_REPLY_NIL; j++)
            v[j] = reply_i64(r[j]);
        if (ws->n > 1)
            it->slot[i] = (struct wslot){ ws->salts[i], v[0], v[2], v[1], v[3], v[4] };
        if (r[0]->type == REDIS_REPLY_NIL)
            continue;
        any = true;
        for (int j = 0; j < 3; j++)
            sum[j] += v[j];
    }
    it->nslots = ws->n > 1 ? ws->n : 0;
    if (any) {
        it->stock = sum[0];
        it->pending = sum[1];
        it->accepted = sum[2];
    }
    return 0;
}

/* The buckets of the items not seen within a second, 512 per round trip
 * (bkmap.h); an item not learnt shows its own slot's counts. */
static void learn_buckets(struct watch *w, const struct wsample *s)
{
    int64_t ids[512];
    size_t n = 0;
    for (size_t i = 0; i <= s->n; i++) {
        if (i < s->n)
            ids[n++] = s->items[i].id;
        if (n == ARRAY_SIZE(ids) || (i == s->n && n > 0)) {
            (void)bkmap_learn(w->bk, w->rp, w->c->redis.key_prefix, ids, n);
            n = 0;
        }
    }
}

/* Stock, pending and buyers of every item (over all its slots: an item in
 * buckets has its units in the reserve and the buckets), and the waiting
 * room of each item shown: one pipelined round trip (on a Redis Cluster,
 * one per shard, each item's commands on its own), after the buckets of
 * items not seen within a second are learnt in one more. */
static void redis_sample(struct watch *w, struct wsample *s)
{
    char err[WATCH_ERR];
    struct rp_batch b;
    struct wslots *ws = NULL;
    if (!w->rp && rp_open(w->c, cfg_role_self(), &w->rp, err, sizeof(err)) != 0) {
        snprintf(s->redis_err, sizeof(s->redis_err), "%s", err);
        if (w->npicked)
            items_list(w, s); /* the rows still show what PostgreSQL knows */
        return;
    }
    if (items_list(w, s) != 0 || !(ws = calloc(s->n ? s->n : 1, sizeof(*ws))) ||
        (!w->bk && !(w->bk = bkmap_new()))) {
        if (!s->redis_err[0])
            snprintf(s->redis_err, sizeof(s->redis_err), "out of memory");
        free(ws);
        return;
    }
    learn_buckets(w, s);
    rp_batch_init(&b);
    size_t sent = 0;
    for (; sent < s->n; sent++) /* out of memory: the items after show "-" */
        if (slots_add(w, &b, s->items[sent].id, &ws[sent]) != 0)
            break;
    /* The rooms, read as seckillctl queue status reads them. */
    int qfirst = b.n;
    size_t nq = 0;
    while (nq < sent && nq < WATCH_MAX_SHOWN && qview_add(&b, w->c->redis.key_prefix, s->items[nq].id) == 0)
        nq++;
    err[0] = '\0';
    if (rp_run(w->rp, &b, err, sizeof(err)) != 0 && err[0])
        snprintf(s->redis_err, sizeof(s->redis_err), "%s", err);
    for (size_t i = 0; i < sent; i++)
        if (slots_take(&b, &ws[i], &s->items[i]) != 0 && !s->redis_err[0])
            snprintf(s->redis_err, sizeof(s->redis_err), "error reply");
    for (size_t i = 0; i < nq; i++)
        if (qview_take(&b, qfirst + (int)i * QVIEW_CMDS, &s->items[i].q) != 0 && !s->redis_err[0])
            snprintf(s->redis_err, sizeof(s->redis_err), "error reply");
    rp_batch_free(&b);
    free(ws);
}

/* --- PostgreSQL -------------------------------------------------------------- */

/* The session's last error into s->pg_err; the session is closed, so the
 * next refresh starts from a new one whatever went wrong. Frees res. */
static void pg_fail(struct watch *w, struct wsample *s, PGresult *res)
{
    const char *m = PQerrorMessage(w->pg);
    size_t n = strlen(m);
    snprintf(s->pg_err, sizeof(s->pg_err), "%.*s", (int)(n && m[n - 1] == '\n' ? n - 1 : n), m);
    PQclear(res);
    PQfinish(w->pg);
    w->pg = NULL;
}

/* A read-only session, kept between refreshes. 0, or -1 with s->pg_err. */
static int pg_session(struct watch *w, struct wsample *s)
{
    char err[WATCH_ERR];
    if (w->pg && PQstatus(w->pg) != CONNECTION_OK) {
        PQfinish(w->pg);
        w->pg = NULL;
    }
    if (w->pg)
        return 0;
    if (pgconn_open(w->c, "seckillctl watch", &w->pg, err, sizeof(err)) != 0) {
        snprintf(s->pg_err, sizeof(s->pg_err), "%s", err);
        return -1;
    }
    /* Every statement of this session refuses to write. */
    PGresult *res = PQexec(w->pg, "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY");
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        pg_fail(w, s, res);
        return -1;
    }
    PQclear(res);
    return 0;
}

/* The item of s with this id (both lists ascend by id: *j only moves on),
 * or NULL. */
static struct witem *merge_find(struct wsample *s, size_t *j, const char *idtext)
{
    int64_t id;
    if (util_parse_i64(idtext, 1, INT64_MAX, &id) != 0)
        return NULL;
    while (*j < s->n && s->items[*j].id < id)
        (*j)++;
    return *j < s->n && s->items[*j].id == id ? &s->items[*j] : NULL;
}

/* Row r of watch_items.sql into its item. */
static void take_item_row(const PGresult *res, int r, struct witem *it)
{
    int64_t *dst[] = { &it->total,   &it->persisted, &it->refused,  &it->to_pay,     &it->paid,
                       &it->expired, &it->cancelled, &it->returned, &it->ret_waiting };
    for (size_t k = 0; k < ARRAY_SIZE(dst); k++)
        if (util_parse_i64(PQgetvalue(res, r, (int)k + 1), 0, INT64_MAX, dst[k]) != 0)
            *dst[k] = -1;
    it->late = 0; /* unless watch_late.sql finds some */
}

/* Late payments per item, when the table exists (before migration 009 it
 * does not: then there are none). 0, or -1 after pg_fail. */
static int pg_late(struct watch *w, struct wsample *s, const char *const *params)
{
    PGresult *res = PQexec(w->pg, embed_late_exists);
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        goto fail;
    bool exists = PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    if (!exists)
        return 0;
    res = PQexecParams(w->pg, embed_watch_late, 1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        goto fail;
    size_t j = 0;
    for (int r = 0; r < PQntuples(res); r++) {
        struct witem *it = merge_find(s, &j, PQgetvalue(res, r, 0));
        if (it && util_parse_i64(PQgetvalue(res, r, 1), 0, INT64_MAX, &it->late) != 0)
            it->late = -1;
    }
    PQclear(res);
    return 0;
fail:
    pg_fail(w, s, res);
    return -1;
}

static void pg_sample(struct watch *w, struct wsample *s)
{
    char *arr = NULL;
    if (s->n == 0 || pg_session(w, s) != 0)
        return;
    /* The ids as one array parameter, "{1,2,3}": 20 characters per id at most. */
    size_t len = s->n * 21 + 3, used = 0;
    if (!(arr = malloc(len))) {
        snprintf(s->pg_err, sizeof(s->pg_err), "out of memory");
        return;
    }
    arr[used++] = '{';
    for (size_t i = 0; i < s->n; i++)
        used += (size_t)snprintf(arr + used, len - used, "%s%" PRId64, i ? "," : "", s->items[i].id);
    snprintf(arr + used, len - used, "}");
    const char *params[] = { arr };
    PGresult *res = PQexecParams(w->pg, embed_watch_items, 1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        pg_fail(w, s, res);
        free(arr);
        return;
    }
    size_t j = 0;
    for (int r = 0; r < PQntuples(res); r++) {
        struct witem *it = merge_find(s, &j, PQgetvalue(res, r, 0));
        if (it)
            take_item_row(res, r, it);
    }
    PQclear(res);
    pg_late(w, s, params);
    free(arr);
}

/* --- Kafka ------------------------------------------------------------------- */

#define WATCH_KAFKA_TIMEOUT_MS 2000

static void kafka_sample(struct watch *w, struct wsample *s)
{
    char err[WATCH_ERR];
    int32_t n;
    /* Opened with the group's id only to read its committed offsets: never
     * subscribed, so it never joins the group nor commits. */
    if (!w->rk && !(w->rk = kmeta_open(w->c, w->c->consumer.group_id, err, sizeof(err)))) {
        snprintf(s->kafka_err, sizeof(s->kafka_err), "%s", err);
        return;
    }
    if (kmeta_partitions(w->rk, w->c->kafka.topic, WATCH_KAFKA_TIMEOUT_MS, &n, err, sizeof(err)) != 0)
        goto fail;
    if (!(s->lo = calloc((size_t)n, sizeof(*s->lo))) || !(s->end = calloc((size_t)n, sizeof(*s->end))) ||
        !(s->committed = calloc((size_t)n, sizeof(*s->committed)))) {
        snprintf(err, sizeof(err), "out of memory");
        goto fail;
    }
    const char *topic = w->c->kafka.topic;
    if (kmeta_range(w->rk, topic, n, WATCH_KAFKA_TIMEOUT_MS, s->lo, s->end, err, sizeof(err)) != 0 ||
        kmeta_committed(w->rk, topic, n, WATCH_KAFKA_TIMEOUT_MS, s->committed, err, sizeof(err)) != 0)
        goto fail;
    s->parts = n;
    return;
fail:
    snprintf(s->kafka_err, sizeof(s->kafka_err), "%s", err);
    free(s->lo);
    free(s->end);
    free(s->committed);
    s->lo = s->end = s->committed = NULL;
    s->parts = 0;
}

/* Lag of partition p: what the group has not consumed. Where it never
 * committed, the consumer starts from the earliest message still kept
 * (auto.offset.reset=earliest), so all of what is kept is lag. */
static int64_t part_lag(const struct wsample *s, int32_t p)
{
    int64_t from = s->committed[p] < 0 ? s->lo[p] : s->committed[p];
    return s->end[p] > from ? s->end[p] - from : 0;
}

static int64_t total_lag(const struct wsample *s)
{
    int64_t lag = 0;
    for (int32_t p = 0; p < s->parts; p++)
        lag += part_lag(s, p);
    return lag;
}

/* --- /healthz ---------------------------------------------------------------- */

struct body {
    char buf[1024];
    size_t len;
};

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    struct body *b = arg;
    size_t n = size * nmemb, room = sizeof(b->buf) - 1 - b->len;
    memcpy(b->buf + b->len, data, n < room ? n : room);
    b->len += n < room ? n : room;
    return n;
}

/* Which dependencies a /healthz answer names down, e.g. "redis down". */
static void health_detail(const char *body, char *out, size_t len)
{
    json_error_t je;
    json_t *o = json_loads(body, 0, &je);
    const char *k;
    json_t *v;
    size_t used = 0;
    out[0] = '\0';
    if (!json_is_object(o)) {
        snprintf(out, len, "unexpected answer");
        json_decref(o);
        return;
    }
    json_object_foreach(o, k, v) {
        if (strcmp(k, "status") != 0 && json_is_string(v) && strcmp(json_string_value(v), "up") != 0 &&
            used < len)
            used += (size_t)snprintf(out + used, len - used, "%s%s %s", used ? ", " : "", k,
                                     json_string_value(v));
    }
    json_decref(o);
}

static void health_sample(struct watch *w, int timeout_ms)
{
    for (size_t i = 0; i < w->neps; i++) {
        struct wep *e = &w->eps[i];
        struct body b = { .len = 0 };
        char url[160];
        long code = 0;
        snprintf(url, sizeof(url), "http://%s/healthz", e->addr);
        curl_easy_reset(w->curl);
        curl_easy_setopt(w->curl, CURLOPT_URL, url);
        curl_easy_setopt(w->curl, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
        curl_easy_setopt(w->curl, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(w->curl, CURLOPT_PROTOCOLS_STR, "http");
        curl_easy_setopt(w->curl, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(w->curl, CURLOPT_WRITEDATA, &b);
        CURLcode rc = curl_easy_perform(w->curl);
        b.buf[b.len] = '\0';
        e->detail[0] = '\0';
        if (rc != CURLE_OK) {
            e->code = 0;
            snprintf(e->detail, sizeof(e->detail), "%s", curl_easy_strerror(rc));
            continue;
        }
        curl_easy_getinfo(w->curl, CURLINFO_RESPONSE_CODE, &code);
        e->code = (int)code;
        if (code != 200)
            health_detail(b.buf, e->detail, sizeof(e->detail));
    }
}

static const char *health_word(const struct wep *e)
{
    return e->code == 200 ? "up" : e->code == 0 ? "unreachable" : "down";
}

/* --- rendering --------------------------------------------------------------- */

/* "1234", or "-" when not known. */
static const char *num(int64_t v, char *buf, size_t len)
{
    if (v < 0)
        return "-";
    snprintf(buf, len, "%" PRId64, v);
    return buf;
}

/* The change per second of one counter since the previous refresh; "-"
 * when either side is not known. */
static const char *rate(int64_t now, int64_t before, int64_t dt_ms, char *buf, size_t len)
{
    if (now < 0 || before < 0 || dt_ms <= 0)
        return "-";
    snprintf(buf, len, "%.1f", (double)(now - before) * 1000.0 / (double)dt_ms);
    return buf;
}

static const struct witem *find(const struct wsample *s, int64_t id)
{
    for (size_t i = 0; s && i < s->n; i++)
        if (s->items[i].id == id)
            return &s->items[i];
    return NULL;
}

/* The sum over every item, -1 where any item's value is unknown. */
static struct witem total(const struct wsample *s)
{
    struct witem t = { .id = 0 };
    int64_t *dst[] = { &t.total, &t.stock,   &t.accepted,  &t.pending,  &t.persisted,   &t.refused, &t.to_pay,
                       &t.paid,  &t.expired, &t.cancelled, &t.returned, &t.ret_waiting, &t.late };
    for (size_t i = 0; i < s->n; i++) {
        const struct witem *it = &s->items[i];
        const int64_t src[] = { it->total,    it->stock,       it->accepted, it->pending, it->persisted,
                                it->refused,  it->to_pay,      it->paid,     it->expired, it->cancelled,
                                it->returned, it->ret_waiting, it->late };
        for (size_t k = 0; k < ARRAY_SIZE(src); k++)
            *dst[k] = (*dst[k] < 0 || src[k] < 0) ? -1 : *dst[k] + src[k];
    }
    return t;
}

static void row(const struct witem *it, const struct witem *prev, int64_t dt, const char *label)
{
    char b[8][32], id[24];
    const struct witem none = WITEM_UNKNOWN(0);
    if (!prev)
        prev = &none;
    printf("%-14s %9s %9s %9s %9s %9s %9s %9s %9s\n", label ? label : num(it->id, id, sizeof(id)),
           num(it->stock, b[0], 32), num(it->accepted, b[1], 32), num(it->pending, b[2], 32),
           num(it->persisted, b[3], 32), num(it->refused, b[4], 32),
           rate(it->accepted, prev->accepted, dt, b[5], 32),
           rate(it->persisted, prev->persisted, dt, b[6], 32),
           rate(it->refused, prev->refused, dt, b[7], 32));
}

/* The states after the sale of one item: a row of the screen's second table. */
static void row_after(const struct witem *it, const char *label)
{
    char b[7][32], id[24];
    printf("%-14s %9s %9s %9s %9s %9s %9s %9s\n", label ? label : num(it->id, id, sizeof(id)),
           num(it->to_pay, b[0], 32), num(it->paid, b[1], 32), num(it->expired, b[2], 32),
           num(it->cancelled, b[3], 32), num(it->returned, b[4], 32), num(it->ret_waiting, b[5], 32),
           num(it->late, b[6], 32));
}

/* The second table: what became of the orders after the sale, per item. */
static void render_after(const struct wsample *s)
{
    printf("\n%-14s %9s %9s %9s %9s %9s %9s %9s\n", "AFTER SALE", "TO PAY", "PAID", "EXPIRED", "CANCELLED",
           "RETURNED", "RET-WAIT", "LATE-PAID");
    for (size_t i = 0; i < s->n && i < WATCH_MAX_SHOWN; i++)
        row_after(&s->items[i], NULL);
    if (s->n > 1) {
        struct witem t = total(s);
        row_after(&t, "all items");
    }
}

/* A room's counter, or -1 (unknown) for an item without a room. */
static int64_t qnum(const struct witem *it, int64_t v)
{
    return it && it->q.opens_ms > 0 ? v : -1;
}

/* The rate of one of a room's counters since the previous refresh. */
#define QRATE(it, pv, field, dt, b) \
    rate(qnum(it, (it)->q.field), qnum(pv, (pv) ? (pv)->q.field : 0), dt, b, 32)

/* The waiting rooms of the items shown that have one: a table of the
 * screen, after the items'. */
static void render_queue(const struct wsample *s, const struct wsample *prev, int64_t dt)
{
    bool any = false;
    for (size_t i = 0; i < s->n && i < WATCH_MAX_SHOWN; i++) {
        const struct witem *it = &s->items[i], *pv = find(prev, it->id);
        char b[8][32];
        if (it->q.opens_ms <= 0)
            continue;
        if (!any)
            printf("\n%-14s %9s %9s %9s %9s %9s %9s %9s %9s\n", "WAITING ROOM", "WAITING", "PRE-QUEUE",
                   "SERVING", "ADM-OUT", "RATE/s", "ADMIT/s", "ABANDON/s", "PAUSED");
        any = true;
        snprintf(b[4], 32, "%.1f", (double)it->q.rate_milli / 1000.0);
        printf("%-14" PRId64 " %9s %9s %9s %9s %9s %9s %9s %9s\n", it->id, num(it->q.waiting, b[0], 32),
               num(it->q.pre_now, b[1], 32), num(it->q.serving, b[2], 32), num(it->q.outstanding, b[3], 32),
               b[4], QRATE(it, pv, admitted_total, dt, b[5]), QRATE(it, pv, passed_total, dt, b[6]),
               it->q.paused ? "yes" : "no");
    }
}

/* An item's room as the line's key=value pairs (nothing for an item
 * without one). */
static void line_queue(const struct witem *it, const struct witem *pv, int64_t dt)
{
    char b[8][32];
    if (it->q.opens_ms <= 0)
        return;
    printf(" queue_waiting=%s queue_prequeue=%s queue_serving=%s queue_admissions_outstanding=%s"
           " queue_rate_per_s=%.1f queue_admitted_per_s=%s queue_abandoned_per_s=%s queue_paused=%d",
           num(it->q.waiting, b[0], 32), num(it->q.pre_now, b[1], 32), num(it->q.serving, b[2], 32),
           num(it->q.outstanding, b[3], 32), (double)it->q.rate_milli / 1000.0,
           QRATE(it, pv, admitted_total, dt, b[5]), QRATE(it, pv, passed_total, dt, b[6]), it->q.paused);
}

/* A slot's name on the screen: "reserve", or "bucket B" with its salt. */
static const char *slot_name(const struct witem *it, int i, char *buf, size_t len)
{
    if (i == 0)
        snprintf(buf, len, "reserve");
    else
        snprintf(buf, len, "b%d (salt %d)", i - 1, it->slot[i].salt);
    return buf;
}

/* The slots of the items shown that sell from buckets (bucket.h): each
 * one's units, buyers, pending orders and transfers given and received (a
 * table of the screen, after the items'). */
static void render_buckets(const struct wsample *s)
{
    bool any = false;
    for (size_t i = 0; i < s->n && i < WATCH_MAX_SHOWN; i++) {
        const struct witem *it = &s->items[i];
        for (int j = 0; j < it->nslots; j++) {
            char b[6][32], name[32];
            const struct wslot *sl = &it->slot[j];
            if (!any)
                printf("\n%-14s %-14s %9s %9s %9s %9s %9s\n", "BUCKETS", "SLOT", "STOCK", "BUYERS", "PENDING",
                       "XFER-OUT", "XFER-IN");
            any = true;
            printf("%-14s %-14s %9s %9s %9s %9s %9s\n", j == 0 ? num(it->id, b[0], 32) : "",
                   slot_name(it, j, name, sizeof(name)), num(sl->stock, b[1], 32), num(sl->buyers, b[2], 32),
                   num(sl->pending, b[3], 32), num(sl->xout, b[4], 32), num(sl->xin, b[5], 32));
        }
    }
}

/* An item's slots as the line's key=value pairs, each a list with the
 * reserve first, then the buckets in order (nothing for an item without
 * buckets). */
static void line_buckets(const struct witem *it)
{
    static const char *const keys[] = { "slot_stock", "slot_buyers", "slot_pending", "slot_transfers_out",
                                        "slot_transfers_in" };
    for (size_t k = 0; it->nslots > 0 && k < ARRAY_SIZE(keys); k++) {
        printf(" %s=", keys[k]);
        for (int j = 0; j < it->nslots; j++) {
            const struct wslot *sl = &it->slot[j];
            const int64_t v[] = { sl->stock, sl->buyers, sl->pending, sl->xout, sl->xin };
            char b[32];
            printf("%s%s", j ? "," : "", num(v[k], b, sizeof(b)));
        }
    }
}

static void render_screen(const struct watch *w, const struct wsample *s, const struct wsample *prev,
                          int interval)
{
    char when[40];
    int64_t dt = prev ? s->mono_ms - prev->mono_ms : 0;
    util_format_time_ms(s->wall_ms, when, sizeof(when));
    /* Home and clear, then the whole picture: no partial lines left over. */
    printf("\033[H\033[2J");
    printf("seckill watch   %s   every %d ms   (Ctrl-C to quit)\n\n", when, interval);
    printf("%-14s %9s %9s %9s %9s %9s %9s %9s %9s\n", "ITEM", "STOCK", "ACCEPTED", "PENDING", "PERSISTED",
           "REFUSED", "ACC/s", "PERS/s", "REF/s");
    for (size_t i = 0; i < s->n && i < WATCH_MAX_SHOWN; i++)
        row(&s->items[i], find(prev, s->items[i].id), dt, NULL);
    if (s->n > 1) {
        struct witem t = total(s), pt = prev ? total(prev) : (struct witem){ .accepted = -1 };
        if (s->n > WATCH_MAX_SHOWN)
            printf("(%zu more items; pick with --item ID)\n", s->n - WATCH_MAX_SHOWN);
        row(&t, prev && prev->n == s->n ? &pt : NULL, dt, "all items");
    }
    if (s->n == 0 && !s->redis_err[0])
        printf("(no item has a sale loaded: seckillctl item create)\n");
    if (s->redis_err[0])
        printf("redis:    %s\n", s->redis_err);
    if (s->pg_err[0])
        printf("postgres: %s\n", s->pg_err);
    render_buckets(s);
    render_queue(s, prev, dt);
    if (s->n > 0)
        render_after(s);

    printf("\nKAFKA %s, group %s", w->c->kafka.topic, w->c->consumer.group_id);
    if (s->kafka_err[0]) {
        printf(": %s\n", s->kafka_err);
    } else {
        printf(": lag %" PRId64 "\n", total_lag(s));
        printf("  %-9s %12s %12s %9s\n", "PARTITION", "END", "COMMITTED", "LAG");
        for (int32_t p = 0; p < s->parts; p++) {
            char b[32];
            printf("  %-9" PRId32 " %12" PRId64 " %12s %9" PRId64 "\n", p, s->end[p],
                   s->committed[p] < 0 ? "-" : num(s->committed[p], b, sizeof(b)), part_lag(s, p));
        }
    }
    printf("\n");
    for (size_t i = 0; i < w->neps; i++)
        printf("%-9s %-24s %s%s%s%s\n", w->eps[i].kind, w->eps[i].addr, health_word(&w->eps[i]),
               w->eps[i].detail[0] ? " (" : "", w->eps[i].detail, w->eps[i].detail[0] ? ")" : "");
    fflush(stdout);
}

/* The states after the sale of one item, as the line's key=value pairs. */
static void line_after(const struct witem *it)
{
    char b[7][32];
    printf(" pending_payment=%s paid=%s expired=%s cancelled=%s returned=%s returns_waiting=%s"
           " late_payments=%s",
           num(it->to_pay, b[0], 32), num(it->paid, b[1], 32), num(it->expired, b[2], 32),
           num(it->cancelled, b[3], 32), num(it->returned, b[4], 32), num(it->ret_waiting, b[5], 32),
           num(it->late, b[6], 32));
}

/* One line per refresh, key=value pairs (logfmt), the items last, each
 * starting with item=ID. Rates are per second since the previous line. */
static void render_line(const struct watch *w, const struct wsample *s, const struct wsample *prev)
{
    char when[40], b[8][32];
    int64_t dt = prev ? s->mono_ms - prev->mono_ms : 0;
    size_t up[2] = { 0, 0 }, all[2] = { 0, 0 };
    util_format_time_ms(s->wall_ms, when, sizeof(when));
    for (size_t i = 0; i < w->neps; i++) {
        int k = strcmp(w->eps[i].kind, "producer") == 0 ? 0 : 1;
        all[k]++;
        up[k] += w->eps[i].code == 200;
    }
    printf("ts=%s", when);
    if (s->kafka_err[0]) {
        printf(" lag=- lag_partitions=-");
    } else {
        printf(" lag=%" PRId64 " lag_partitions=", total_lag(s));
        for (int32_t p = 0; p < s->parts; p++)
            printf("%s%" PRId64, p ? "," : "", part_lag(s, p));
    }
    printf(" producers_up=%zu/%zu consumers_up=%zu/%zu", up[0], all[0], up[1], all[1]);
    for (size_t i = 0; i < w->neps; i++)
        printf(" %s=%s:%s", w->eps[i].kind, w->eps[i].addr, health_word(&w->eps[i]));
    printf(" redis=%s postgres=%s kafka=%s items=%zu", s->redis_err[0] ? "down" : "up",
           s->pg_err[0] ? "down" : "up", s->kafka_err[0] ? "down" : "up", s->n);
    for (size_t i = 0; i < s->n && i < WATCH_MAX_SHOWN; i++) {
        const struct witem *it = &s->items[i], *pv = find(prev, it->id);
        const struct witem none = WITEM_UNKNOWN(0);
        if (!pv)
            pv = &none;
        printf(" item=%" PRId64 " stock=%s accepted=%s pending=%s persisted=%s refused=%s"
               " accepted_per_s=%s persisted_per_s=%s refused_per_s=%s",
               it->id, num(it->stock, b[0], 32), num(it->accepted, b[1], 32), num(it->pending, b[2], 32),
               num(it->persisted, b[3], 32), num(it->refused, b[4], 32),
               rate(it->accepted, pv->accepted, dt, b[5], 32),
               rate(it->persisted, pv->persisted, dt, b[6], 32),
               rate(it->refused, pv->refused, dt, b[7], 32));
        line_after(it);
        line_buckets(it);
        line_queue(it, pv, dt);
    }
    printf("\n");
    fflush(stdout);
}

/* --- the loop ---------------------------------------------------------------- */

static void sample_free(struct wsample *s)
{
    free(s->items);
    free(s->lo);
    free(s->end);
    free(s->committed);
    memset(s, 0, sizeof(*s));
}

static int add_ep(struct watch *w, const char *kind, const char *addr)
{
    if (w->neps == WATCH_MAX_EPS || strlen(addr) >= sizeof(w->eps[0].addr) || !strchr(addr, ':')) {
        fprintf(stderr, "seckillctl: watch: --%s takes HOST:PORT (at most %d addresses), got '%s'\n", kind,
                WATCH_MAX_EPS, addr);
        return -1;
    }
    struct wep *e = &w->eps[w->neps++];
    e->kind = kind;
    snprintf(e->addr, sizeof(e->addr), "%s", addr);
    return 0;
}

/* A daemon listening on every address is asked on loopback. */
static const char *reachable(const char *listen)
{
    bool any = strcmp(listen, "0.0.0.0") == 0 || strcmp(listen, "::") == 0 || listen[0] == '\0';
    return any ? "127.0.0.1" : listen;
}

static void usage(void)
{
    fprintf(stderr, "usage: seckillctl watch [--item ID]... [--interval MS] [--count N]\n"
                    "                        [--producer HOST:PORT]... [--consumer HOST:PORT]...\n"
                    "  --interval MS   refresh every MS ms (100..3600000, default 1000)\n"
                    "  --count N       stop after N refreshes (default: until interrupted)\n"
                    "  --producer/--consumer  /healthz addresses (default: from the configuration)\n");
}

/* Without --producer or --consumer, the daemons this configuration
 * describes. */
static void default_endpoints(struct watch *w, bool own_producer, bool own_consumer)
{
    const struct cfg *c = w->c;
    char addr[128];
    if (!own_producer) {
        snprintf(addr, sizeof(addr), "%s:%d", reachable(c->producer.listen), c->producer.port);
        add_ep(w, "producer", addr);
    }
    if (!own_consumer && c->consumer.metrics_port > 0) {
        snprintf(addr, sizeof(addr), "%s:%d", reachable(c->consumer.metrics_listen),
                 c->consumer.metrics_port);
        add_ep(w, "consumer", addr);
    }
}

/* The command line into w (items, endpoints), *interval and *count. 0, or
 * -1 after printing why (exit status 2). */
static int parse_options(struct watch *w, int argc, char **argv, int64_t *interval, int64_t *count)
{
    static const struct option opts[] = {
        { "item", required_argument, NULL, 'i' },     { "interval", required_argument, NULL, 'n' },
        { "count", required_argument, NULL, 'k' },    { "producer", required_argument, NULL, 'p' },
        { "consumer", required_argument, NULL, 'c' }, { NULL, 0, NULL, 0 },
    };
    bool own_producer = false, own_consumer = false;
    int64_t v;
    int o;

    optind = 1;
    while ((o = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
        switch (o) {
        case 'i':
            if (util_parse_i64(optarg, 1, INT64_MAX, &v) != 0 || w->npicked == WATCH_MAX_PICKED) {
                fprintf(stderr,
                        "seckillctl: watch: --item takes a positive id (at most %d items), got '%s'\n",
                        WATCH_MAX_PICKED, optarg);
                return -1;
            }
            w->picked[w->npicked++] = v;
            break;
        case 'n':
            if (util_parse_i64(optarg, 100, 3600000, interval) != 0) {
                fprintf(stderr, "seckillctl: watch: --interval takes 100..3600000 ms, got '%s'\n", optarg);
                return -1;
            }
            break;
        case 'k':
            if (util_parse_i64(optarg, 1, INT64_MAX, count) != 0) {
                fprintf(stderr, "seckillctl: watch: --count takes a positive number, got '%s'\n", optarg);
                return -1;
            }
            break;
        case 'p':
        case 'c':
            if (add_ep(w, o == 'p' ? "producer" : "consumer", optarg) != 0)
                return -1;
            own_producer |= o == 'p';
            own_consumer |= o == 'c';
            break;
        default:
            usage();
            return -1;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "seckillctl: watch: unexpected argument '%s'\n", argv[optind]);
        usage();
        return -1;
    }
    default_endpoints(w, own_producer, own_consumer);
    return 0;
}

/* Sample and show every interval ms, count times (0: until a signal).
 * Refreshes keep their pace whatever a slow engine cost; a signal ends the
 * wait within 50 ms. */
static void watch_loop(struct watch *w, int64_t interval, int64_t count)
{
    struct wsample cur = { 0 }, prev = { 0 };
    bool have_prev = false;
    int64_t next = util_mono_ms();
    for (int64_t done = 0; !stop_requested && (count == 0 || done < count); done++) {
        cur.mono_ms = util_mono_ms();
        cur.wall_ms = util_wall_ms();
        redis_sample(w, &cur);
        pg_sample(w, &cur);
        kafka_sample(w, &cur);
        health_sample(w, (int)(interval < 1000 ? interval : 1000));
        if (w->tty)
            render_screen(w, &cur, have_prev ? &prev : NULL, (int)interval);
        else
            render_line(w, &cur, have_prev ? &prev : NULL);
        sample_free(&prev);
        prev = cur;
        memset(&cur, 0, sizeof(cur));
        have_prev = true;
        if (count && done + 1 >= count)
            break;
        next += interval;
        for (int64_t now = util_mono_ms(); now < next && !stop_requested; now = util_mono_ms())
            util_sleep_ms(next - now < 50 ? next - now : 50);
        if (util_mono_ms() > next + interval)
            next = util_mono_ms(); /* fell behind: do not rush to catch up */
    }
    sample_free(&cur);
    sample_free(&prev);
}

/* Close what the samples opened, and the HTTP client. */
static void watch_close(struct watch *w)
{
    rp_close(w->rp);
    bkmap_free(w->bk);
    PQfinish(w->pg);
    if (w->rk) {
        rd_kafka_consumer_close(w->rk); /* never subscribed: leaves no group it never joined */
        rd_kafka_destroy(w->rk);
    }
    curl_easy_cleanup(w->curl);
    curl_global_cleanup();
}

int watch_cmd(const struct cfg *c, int argc, char **argv)
{
    struct watch w = { .c = c, .tty = isatty(STDOUT_FILENO) == 1 };
    int64_t interval = 1000, count = 0;

    if (parse_options(&w, argc, argv, &interval, &count) != 0)
        return 2;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK || !(w.curl = curl_easy_init())) {
        fprintf(stderr, "seckillctl: watch: cannot start the HTTP client\n");
        return 1;
    }
    struct sigaction sa = { .sa_handler = on_signal };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (w.tty)
        printf("\033[?25l"); /* no cursor blinking over the table */
    watch_loop(&w, interval, count);
    if (w.tty)
        printf("\033[?25h");
    fflush(stdout);
    watch_close(&w);
    return 0;
}
