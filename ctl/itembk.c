#include "itembk.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctlrp.h"
#include "funclibs.h"
#include "keys.h"
#include "rfunc.h"

/* The most fields a window hash may hold for a copy (it has five kinds). */
#define WINDOW_FIELDS_MAX 16
/* "S0,S1,..." for BUCKET_MAX salts below BUCKET_SALT_TRIES. */
#define SALTS_TEXT_MAX (BUCKET_MAX * 6)


static int say_keys(int64_t item)
{
    fprintf(stderr, "seckillctl: redis: item %" PRId64 ": its keys do not fit (redis.key_prefix)\n", item);
    return -1;
}

int itembk_place(struct rp *p, const struct cfg *c, int64_t item, int k, struct itembk *out)
{
    char key[KEYS_MAX], err[256];
    enum rp_status st;
    memset(out, 0, sizeof(*out));
    out->k = k;
    if (k <= 1)
        return 0;
    if (keys_item(key, sizeof(key), c->redis.key_prefix, item, KEYS_ITEM_STOCK) < 0)
        return say_keys(item);
    /* A first command, so that the Cluster's slot map is known. */
    redisReply *r = rp_callf(p, key, &st, err, sizeof(err), "EXISTS %s", key);
    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "seckillctl: redis: %s\n", r ? r->str : err);
        if (r)
            freeReplyObject(r);
        return -1;
    }
    freeReplyObject(r);
    if (bucket_place(c->redis.key_prefix, item, k, rp_nodes(p), rp_node_fn, p, out->salts) != 0) {
        fprintf(stderr, "seckillctl: item %" PRId64 ": no salts place %d buckets on the primaries (a hole "
                        "in the Cluster's slot map?)\n", item, k);
        return -1;
    }
    return 0;
}

int itembk_idle(struct rp *p, const struct cfg *c, int64_t item, const struct itembk *bk)
{
    char k[KEYS_ITEM_PARTS][KEYS_MAX];
    struct rp_batch b;
    int ret = -1, slots = bk->k > 1 ? 1 + bk->k : 1;
    rp_batch_init(&b);
    for (int i = 0; i < slots; i++) {
        if (keys_item_all_at(k, c->redis.key_prefix, item, i ? bk->salts[i - 1] : BUCKET_HOME) != 0 ||
            rp_addf(&b, k[KEYS_ITEM_STOCK], "HLEN %s", k[KEYS_ITEM_PENDING]) < 0 ||
            rp_addf(&b, k[KEYS_ITEM_STOCK], "SCARD %s", k[KEYS_ITEM_BUYERS]) < 0) {
            fprintf(stderr, "seckillctl: redis: out of memory, or keys that do not fit\n");
            goto fail;
        }
    }
    if (ctlrp_run_all(p, &b, "reading the item's buyers and reservations") != 0)
        goto fail;
    for (int i = 0; i < slots; i++) {
        long long pending = rp_reply(&b, 2 * i)->integer, buyers = rp_reply(&b, 2 * i + 1)->integer;
        if (pending || buyers) {
            char where[64] = "its own slot";
            if (i)
                snprintf(where, sizeof(where), "its bucket %d (salt %d)", i - 1, bk->salts[i - 1]);
            fprintf(stderr, "seckillctl: item %" PRId64 ": %s has %s in Redis: orders may still be on "
                            "their way to the database; refusing to reset its stock\n",
                    item, where, pending ? "pending reservations" : "buyers");
            goto fail;
        }
    }
    ret = 0;
fail:
    rp_batch_free(&b);
    return ret;
}

int itembk_reset(struct rp *p, const struct cfg *c, int64_t item, const struct itembk *bk)
{
    const struct rfunc s = RFUNC_INIT("seckill_item_load", &funclib_ctl);
    char k[KEYS_ITEM_PARTS][KEYS_MAX];
    for (int b = 0; bk->k > 1 && b < bk->k; b++) {
        if (keys_item_all_at(k, c->redis.key_prefix, item, bk->salts[b]) != 0)
            return say_keys(item);
        const char *argv[] = { k[KEYS_ITEM_STOCK], k[KEYS_ITEM_BUYERS], k[KEYS_ITEM_PENDING],
                               k[KEYS_ITEM_WINDOW], k[KEYS_ITEM_ORDERS], "0", "", "" };
        redisReply *r = ctlrp_fcall(p, &s, true, 5, 3, argv, REDIS_REPLY_INTEGER);
        if (r == NULL)
            return -1;
        long long v = r->integer;
        freeReplyObject(r);
        if (v != 1) {
            fprintf(stderr,
                    "seckillctl: item %" PRId64 ": its bucket %d (salt %d) has %s in Redis: orders may still "
                    "be on their way to the database; refusing to reset it\n",
                    item, b, bk->salts[b], v == -1 ? "pending reservations" : "buyers");
            return -1;
        }
    }
    return 0;
}

int itembk_publish(struct rp *p, const struct cfg *c, int64_t item, const struct itembk *bk)
{
    char win[KEYS_MAX], text[SALTS_TEXT_MAX];
    struct rp_batch b;
    int i, ret = -1;
    if (keys_item(win, sizeof(win), c->redis.key_prefix, item, KEYS_ITEM_WINDOW) < 0 ||
        bucket_format(text, sizeof(text), bk->salts, bk->k) < 0)
        return say_keys(item);
    rp_batch_init(&b);
    i = bk->k > 1 ? rp_addf(&b, win, "HSET %s %s %s", win, KEYS_WINDOW_BUCKETS, text)
                  : rp_addf(&b, win, "HDEL %s %s", win, KEYS_WINDOW_BUCKETS);
    if (i < 0)
        fprintf(stderr, "seckillctl: redis: naming the item's buckets: out of memory\n");
    else
        ret = ctlrp_run_durable(p, &b, "naming the item's buckets");
    rp_batch_free(&b);
    return ret == 0 ? itembk_copy_window(p, c, item) : -1;
}

/* The item's window hash (HGETALL's reply w) split: its buckets into bk,
 * every other field into pairs[0 .. *n-1]. 0, or -1 (said). */
static int split_window(int64_t item, const redisReply *w, struct itembk *bk, const char **pairs, int *n)
{
    const char *text = "";
    *n = 0;
    for (size_t i = 0; i + 1 < w->elements; i += 2) {
        const redisReply *f = w->element[i], *v = w->element[i + 1];
        if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
            continue;
        if (strcmp(f->str, KEYS_WINDOW_BUCKETS) == 0) {
            text = v->str;
            continue;
        }
        if (*n + 2 > 2 * WINDOW_FIELDS_MAX) {
            fprintf(stderr, "seckillctl: item %" PRId64 ": its window hash has too many fields\n", item);
            return -1;
        }
        pairs[(*n)++] = f->str;
        pairs[(*n)++] = v->str;
    }
    if (bucket_parse(text, bk->salts, &bk->k) != 0) {
        fprintf(stderr, "seckillctl: item %" PRId64 ": its window names buckets '%s', not as seckillctl "
                        "writes them (the database's items.bucket_salts has them)\n", item, text);
        return -1;
    }
    return 0;
}

int itembk_copy_window(struct rp *p, const struct cfg *c, int64_t item)
{
    const char *argv[1 + 2 * WINDOW_FIELDS_MAX];
    char win[KEYS_MAX], bwin[BUCKET_MAX][KEYS_MAX];
    struct rp_batch r, w;
    struct itembk bk;
    int n = 0, ret = -1;

    rp_batch_init(&r);
    rp_batch_init(&w);
    if (keys_item(win, sizeof(win), c->redis.key_prefix, item, KEYS_ITEM_WINDOW) < 0) {
        say_keys(item);
        goto fail;
    }
    if (rp_addf(&r, win, "HGETALL %s", win) < 0) {
        fprintf(stderr, "seckillctl: redis: out of memory\n");
        goto fail;
    }
    if (ctlrp_run_all(p, &r, "reading the item's window") != 0)
        goto fail;
    if (split_window(item, rp_reply(&r, 0), &bk, argv + 1, &n) != 0)
        goto fail;
    for (int b = 0; bk.k > 1 && b < bk.k; b++) {
        if (keys_item_at(bwin[b], KEYS_MAX, c->redis.key_prefix, item, bk.salts[b], KEYS_ITEM_WINDOW) < 0) {
            say_keys(item);
            goto fail;
        }
        argv[0] = bwin[b];
        if (rp_fcall(&w, "seckill_window_put", 1, n, argv, NULL) < 0) {
            fprintf(stderr, "seckillctl: redis: out of memory\n");
            goto fail;
        }
    }
    ret = bk.k > 1 ? ctlrp_run_durable(p, &w, "copying the item's window to its buckets") : 0;
fail:
    rp_batch_free(&r);
    rp_batch_free(&w);
    return ret;
}

/* The value of field in an HGETALL reply, or NULL. */
static const char *field_of(const redisReply *h, const char *field)
{
    for (size_t i = 0; h->type == REDIS_REPLY_ARRAY && i + 1 < h->elements; i += 2)
        if (h->element[i]->type == REDIS_REPLY_STRING && h->element[i + 1]->type == REDIS_REPLY_STRING &&
            strcmp(h->element[i]->str, field) == 0)
            return h->element[i + 1]->str;
    return NULL;
}

/* Whether a bucket's window (HGETALL's reply) is the item's (home), but for
 * the field that names the buckets. */
static bool same_window(const redisReply *home, const redisReply *bucket)
{
    size_t fields = 0;
    for (size_t i = 0; home->type == REDIS_REPLY_ARRAY && i + 1 < home->elements; i += 2) {
        const char *f = home->element[i]->str, *v = field_of(bucket, f);
        if (strcmp(f, KEYS_WINDOW_BUCKETS) == 0)
            continue;
        if (v == NULL || strcmp(v, home->element[i + 1]->str) != 0)
            return false;
        fields++;
    }
    return bucket->type == REDIS_REPLY_ARRAY && bucket->elements == 2 * fields;
}

int itembk_check(struct rp *p, const struct cfg *c, int64_t item, const struct itembk *db,
                 struct itembk_view *out)
{
    char win[KEYS_MAX], text[SALTS_TEXT_MAX];
    struct rp_batch r;
    int ret = -1;
    memset(out, 0, sizeof(*out));
    rp_batch_init(&r);
    if (keys_item(win, sizeof(win), c->redis.key_prefix, item, KEYS_ITEM_WINDOW) < 0 ||
        bucket_format(text, sizeof(text), db->salts, db->k) < 0) {
        say_keys(item);
        goto fail;
    }
    int bad = rp_addf(&r, win, "HGETALL %s", win) < 0;
    for (int b = 0; b < db->k && db->k > 1 && !bad; b++) {
        char bwin[KEYS_MAX];
        const char *prefix = c->redis.key_prefix;
        bad = keys_item_at(bwin, sizeof(bwin), prefix, item, db->salts[b], KEYS_ITEM_WINDOW) < 0 ||
              rp_addf(&r, bwin, "HGETALL %s", bwin) < 0;
    }
    if (bad) {
        fprintf(stderr, "seckillctl: redis: out of memory, or keys that do not fit\n");
        goto fail;
    }
    if (ctlrp_run_all(p, &r, "reading the windows of the item and its buckets") != 0)
        goto fail;
    const redisReply *home = rp_reply(&r, 0);
    const char *named = field_of(home, KEYS_WINDOW_BUCKETS);
    snprintf(out->names, sizeof(out->names), "%s", named ? named : "");
    out->named = strcmp(out->names, text) == 0;
    for (int b = 0; b < db->k && db->k > 1; b++) {
        out->copy_ok[b] = same_window(home, rp_reply(&r, 1 + b));
        out->stale_copies += !out->copy_ok[b];
    }
    ret = 0;
fail:
    rp_batch_free(&r);
    return ret;
}

/* One bucket's line: its primary, stock (r's reply i), buyers (i + 1), and
 * whether its window is the item's (v). */
static void show_bucket(struct rp *p, const struct cfg *c, int64_t item, int b, int salt,
                        const struct rp_batch *r, int i, const struct itembk_view *v)
{
    char key[KEYS_MAX], node[128] = "?";
    const redisReply *stock = rp_reply(r, i), *buyers = rp_reply(r, i + 1);
    keys_item_at(key, sizeof(key), c->redis.key_prefix, item, salt, KEYS_ITEM_STOCK);
    int n = rp_node_of_key(p, key, strlen(key));
    if (n >= 0)
        rp_node_name(p, n, node, sizeof(node));
    printf("  bucket %-3d salt %d on %s: stock %s, buyers %lld, window %s\n", b, salt, node,
           stock->type == REDIS_REPLY_STRING ? stock->str : "(none: 'seckillctl item load')",
           buyers->type == REDIS_REPLY_INTEGER ? buyers->integer : -1,
           v->copy_ok[b] ? "the item's" : "DIFFERS from the item's ('seckillctl reconcile --fix')");
}

/* The item's units over its slots: the reserve's stock (the batch's last
 * reply) and every bucket's, with the buyers in the buckets: the figures to
 * hold against the database's stock_left and sold. */
static void show_total(const struct rp_batch *r, int k)
{
    const redisReply *home = rp_reply(r, 2 * k);
    long long reserve = home->type == REDIS_REPLY_STRING ? strtoll(home->str, NULL, 10) : 0;
    long long in = 0, buyers = 0;
    for (int b = 0; b < k; b++) {
        const redisReply *st = rp_reply(r, 2 * b), *by = rp_reply(r, 2 * b + 1);
        in += st->type == REDIS_REPLY_STRING ? strtoll(st->str, NULL, 10) : 0;
        buyers += by->type == REDIS_REPLY_INTEGER ? by->integer : 0;
    }
    printf("  all slots  stock %lld (the reserve %lld, the buckets %lld), buyers %lld\n", reserve + in,
           reserve, in, buyers);
}

int itembk_show(struct rp *p, const struct cfg *c, int64_t item, const struct itembk *db)
{
    char text[SALTS_TEXT_MAX], key[KEYS_MAX], set[KEYS_MAX];
    struct itembk_view v;
    struct rp_batch r;
    int bad = 0, ret = -1;
    if (db->k <= 1)
        return 0;
    rp_batch_init(&r);
    bucket_format(text, sizeof(text), db->salts, db->k);
    for (int b = 0; b < db->k && !bad; b++)
        bad = keys_item_at(key, sizeof(key), c->redis.key_prefix, item, db->salts[b], KEYS_ITEM_STOCK) < 0 ||
              keys_item_at(set, sizeof(set), c->redis.key_prefix, item, db->salts[b], KEYS_ITEM_BUYERS) < 0 ||
              rp_addf(&r, key, "GET %s", key) < 0 || rp_addf(&r, key, "SCARD %s", set) < 0;
    bad = bad || keys_item(key, sizeof(key), c->redis.key_prefix, item, KEYS_ITEM_STOCK) < 0 ||
          rp_addf(&r, key, "GET %s", key) < 0;
    if (bad) {
        fprintf(stderr, "seckillctl: redis: out of memory, or keys that do not fit\n");
        goto fail;
    }
    if (ctlrp_run_all(p, &r, "reading the item's buckets") != 0)
        goto fail;
    if (itembk_check(p, c, item, db, &v) != 0)
        goto fail;
    int spread = bucket_spread(c->redis.key_prefix, item, db->k, db->salts, rp_node_fn, p);
    int nodes = rp_nodes(p), want = db->k < nodes ? db->k : nodes;
    printf("  buckets    %d (salts %s), on %d of %d primaries%s; Redis names %s%s\n", db->k, text, spread,
           nodes, spread < want ? " (FEWER than it could: a reshard moved them)" : "",
           v.names[0] ? v.names : "none", v.named ? "" : " (DIFFERS from the database)");
    for (int b = 0; b < db->k; b++)
        show_bucket(p, c, item, b, db->salts[b], &r, 2 * b, &v);
    show_total(&r, db->k);
    ret = 0;
fail:
    rp_batch_free(&r);
    return ret;
}
