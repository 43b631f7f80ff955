#include "sweep.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bucket.h"
#include "funclibs.h"
#include "keys.h"
#include "log.h"
#include "order.h"
#include "orderidx.h"
#include "rfunc.h"
#include "util.h"
#include "xfer.h"

/* Claims per item per pass: bounds one pass's memory and Kafka burst. */
#define SWEEP_LIMIT 1000

struct sweep_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t outstanding;
};

struct sweep_ticket {
    struct pub_ticket t; /* first */
    struct sweep_wait *w;
    char oid[ORDER_ID_STR_MAX];
    struct oidx_entry idx; /* the order, for its index */
    int ok;
};

static void on_delivery(struct pub_ticket *t, rd_kafka_resp_err_t err, rd_kafka_msg_status_t status)
{
    struct sweep_ticket *st = (struct sweep_ticket *)t;
    (void)status;
    pthread_mutex_lock(&st->w->mu);
    st->ok = err == RD_KAFKA_RESP_ERR_NO_ERROR;
    st->w->outstanding--;
    pthread_cond_signal(&st->w->cv);
    pthread_mutex_unlock(&st->w->mu);
}

static int64_t count_of(const struct rp_batch *b, int i)
{
    const redisReply *r = rp_reply(b, i);
    return r && r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
}

/* Count the item's reservations into st, then claim its stale ones with
 * seckill_sweep_claim, in one round trip: *out is its reply, {order id,
 * message}... 0, or -1 with err set. */
static int claim_stale(struct rp *rp, const struct rfunc *claim, int64_t age_ms, char keys[][KEYS_MAX],
                       struct sweep_stats *st, redisReply **out, char *err, size_t errlen)
{
    char cutoff[24], now[24], limit[16];
    const char *argv[5];
    int64_t wall = util_wall_ms();
    struct rp_batch b;
    rp_batch_init(&b);
    snprintf(cutoff, sizeof(cutoff), "%" PRId64, wall - age_ms);
    snprintf(now, sizeof(now), "%" PRId64, wall);
    snprintf(limit, sizeof(limit), "%d", SWEEP_LIMIT);
    argv[0] = keys[KEYS_ITEM_UNPUB], argv[1] = keys[KEYS_ITEM_PENDING];
    argv[2] = cutoff, argv[3] = now, argv[4] = limit;
    rp_addf(&b, keys[KEYS_ITEM_PENDING], "HLEN %s", keys[KEYS_ITEM_PENDING]);
    rp_addf(&b, keys[KEYS_ITEM_UNPUB], "ZCARD %s", keys[KEYS_ITEM_UNPUB]);
    int i = rp_fcall(&b, claim->name, 2, 3, argv, NULL);
    char why[512];
    if (i < 0 || rp_run(rp, &b, why, sizeof(why)) != 0 || rp_reply(&b, i)->type != REDIS_REPLY_ARRAY) {
        const redisReply *r = i < 0 ? NULL : rp_reply(&b, i);
        if (r != NULL)
            rfunc_error_text(claim, NULL, r, why, sizeof(why));
        snprintf(err, errlen, "redis: sweep claim: %s", i < 0 ? "out of memory" : why);
        rp_batch_free(&b);
        return -1;
    }
    st->pending += count_of(&b, 0);
    st->unpublished += count_of(&b, 1);
    *out = rp_take(&b, i);
    rp_batch_free(&b);
    return 0;
}

/* With redis.min_replicas_ack, nothing claimed is published before that
 * many replicas hold it: WAIT on the connection that ran the claim (a write,
 * so the replicas that acknowledge it also hold every reservation written
 * before it), with a read of the claim's key to route it there; a run that
 * had to reconnect in between proves nothing. A primary cut off from its
 * replicas (split brain) loses its reservations at the failover; one
 * published from it anyway became an order Redis never counted, its unit sold
 * again to a buyer told 202 whose order PostgreSQL then refused (the nemesis,
 * issue #32: seed 1107403330, 5 lost). 1 when they hold it, else 0 with err
 * set. */
static int replicas_hold(struct rp *rp, const char *key, char *err, size_t errlen)
{
    int want = rp_durability(rp), ok;
    unsigned long reconnects = rp_stats(rp)->reconnects;
    struct rp_batch b;
    char why[256] = "";
    if (want <= 0)
        return 1;
    rp_batch_init(&b);
    rp_addf(&b, key, "ZCARD %s", key);
    rp_durable(&b);
    ok = rp_run(rp, &b, why, sizeof(why)) == 0 && !rp_replicas_short(&b) &&
         rp_stats(rp)->reconnects == reconnects;
    if (!ok)
        snprintf(err, errlen, "redis: WAIT %d: %s", want,
                 why[0] ? why : "fewer replicas hold the claimed reservations");
    rp_batch_free(&b);
    return ok;
}

/* Hand the n claimed messages of r to Kafka, one ticket each in tk; a
 * ticket left without done was not sent (counted failed). */
static void send_claimed(struct pub *p, const redisReply *r, size_t n, int64_t item,
                         struct sweep_ticket *tk, struct sweep_wait *w, struct sweep_stats *st)
{
    for (size_t i = 0; i < n; i++) {
        const redisReply *id = r->element[2 * i], *msg = r->element[2 * i + 1];
        struct order o;
        char why[128];
        if (id->type != REDIS_REPLY_STRING || msg->type != REDIS_REPLY_STRING ||
            order_decode(msg->str, msg->len, &o, why, sizeof(why)) != 0) {
            /* Never seen in practice; keep it for an operator, do not guess.
             * Every pass claims it again: the caller says so once. */
            log_debug("sweep: item %" PRId64 ": undecodable reservation left in place", item);
            st->undecodable++;
            st->failed++;
            continue;
        }
        tk[i].t.done = on_delivery;
        tk[i].w = w;
        tk[i].idx = (struct oidx_entry){ o.order_id, item, o.user_id };
        snprintf(tk[i].oid, sizeof(tk[i].oid), "%.*s", (int)id->len, id->str);
        pthread_mutex_lock(&w->mu);
        w->outstanding++;
        pthread_mutex_unlock(&w->mu);
        if (pub_send(p, o.user_id, msg->str, msg->len, &tk[i].t) != RD_KAFKA_RESP_ERR_NO_ERROR) {
            pthread_mutex_lock(&w->mu);
            w->outstanding--;
            pthread_mutex_unlock(&w->mu);
            tk[i].t.done = NULL;
            st->failed++;
        }
    }
}

/* Wait for every sent ticket's delivery report, then mark the delivered
 * ones published (ZREM from the unpublished set) and index them (orderidx.h):
 * an order whose buyer heard "unknown" while Redis was away was never
 * indexed, and its id must still lead to it. */
static void settle_claimed(const struct cfg *c, struct rp *rp, const char *unpub_key, struct sweep_ticket *tk,
                           size_t n, struct sweep_wait *w, struct sweep_stats *st)
{
    struct oidx_entry *idx = calloc(n, sizeof(*idx));
    size_t nidx = 0;
    struct rp_batch b;
    char err[256];
    rp_batch_init(&b);
    /* librdkafka reports every message within message.timeout.ms, so this
     * wait ends; the tickets live in the caller until it does. */
    pthread_mutex_lock(&w->mu);
    while (w->outstanding > 0)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    for (size_t i = 0; i < n; i++) {
        if (!tk[i].t.done)
            continue;
        if (!tk[i].ok) {
            st->failed++;
            continue;
        }
        st->republished++;
        rp_addf(&b, unpub_key, "ZREM %s %s", unpub_key, tk[i].oid);
        if (idx)
            idx[nidx++] = tk[i].idx;
    }
    /* Best effort, as the producer's own marks and index writes: a mark
     * that did not arrive is one more harmless re-publish. */
    if (nidx)
        oidx_add(&b, c->redis.key_prefix, CFG_GET(c->producer.status_ttl_s), idx, nidx);
    if (rp_run(rp, &b, err, sizeof(err)) != 0)
        log_debug("sweep: marks and index: %s", err);
    rp_batch_free(&b);
    free(idx);
}

/* Claim and re-publish the stale reservations of one of the item's slots:
 * its own (salt BUCKET_HOME) or a bucket's (bucket.h). */
static int sweep_slot(const struct cfg *c, struct rp *rp, struct pub *p, const struct rfunc *claim,
                      int64_t item, int salt, int64_t age_ms, struct sweep_stats *st,
                      char *err, size_t errlen)
{
    char keys[KEYS_ITEM_PARTS][KEYS_MAX];
    struct sweep_wait w = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };
    struct sweep_ticket *tk = NULL;
    redisReply *r = NULL;
    size_t n = 0;
    int ret = -1;

    if (keys_item_all_at(keys, c->redis.key_prefix, item, salt) != 0) {
        snprintf(err, errlen, "item %" PRId64 ": its keys do not fit (redis.key_prefix)", item);
        goto fail;
    }
    if (claim_stale(rp, claim, age_ms, keys, st, &r, err, errlen) != 0)
        goto fail;
    n = r->elements / 2;
    if (n == 0) {
        ret = 0;
        goto fail;
    }
    st->claimed += (int64_t)n;
    if (!replicas_hold(rp, keys[KEYS_ITEM_UNPUB], err, errlen)) {
        /* claimed, not sent: the next pass after the age tries again */
        st->failed += (int64_t)n;
        goto fail;
    }
    tk = calloc(n, sizeof(*tk));
    if (!tk) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    send_claimed(p, r, n, item, tk, &w, st);
    settle_claimed(c, rp, keys[KEYS_ITEM_UNPUB], tk, n, &w, st);
    ret = 0;
fail:
    free(tk);
    freeReplyObject(r);
    return ret;
}


/* The item's buckets as its window names them (KEYS_WINDOW_BUCKETS): *k 1
 * for none, or for a name seckillctl never writes (counted in bad_buckets:
 * the item's own slot is swept all the same). 0, or -1 with err set. */
static int item_buckets(const struct cfg *c, struct rp *rp, int64_t item, int *k, int salts[BUCKET_MAX],
                        struct sweep_stats *st, char *err, size_t errlen)
{
    char key[KEYS_MAX], why[256];
    enum rp_status rst;
    *k = 1;
    keys_item(key, sizeof(key), c->redis.key_prefix, item, KEYS_ITEM_WINDOW);
    redisReply *r = rp_callf(rp, key, &rst, why, sizeof(why), "HGET %s %s", key, KEYS_WINDOW_BUCKETS);
    if (!r || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_NIL)) {
        snprintf(err, errlen, "redis: HGET %s: %s", key,
                 !r ? why : r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        freeReplyObject(r);
        return -1;
    }
    if (r->type == REDIS_REPLY_STRING && bucket_parse(r->str, salts, k) != 0) {
        log_debug("sweep: item %" PRId64 ": its window names buckets '%s': only its own slot swept", item,
                  r->str);
        st->bad_buckets++;
        *k = 1;
    }
    freeReplyObject(r);
    return 0;
}

/* The item's transfers between its slots left half done (xfer.h: a
 * producer that died between the halves, or whose Redis stopped answering
 * and that never came back) finished, so that their units go on sale again
 * without an operator. Every transfer leaves one record where it gave and
 * one where it was received: the counts of both kinds over the slots (one
 * HLEN each, one round trip) differ only while one is half done, and only
 * then are the records read (xfer_finish: safe at any time, beside the
 * producer that may be finishing it too). A failure is said at debug level
 * and tried again next pass. */
static void finish_transfers(const struct cfg *c, struct rp *rp, int64_t item, int k, const int salts[],
                             struct sweep_stats *st)
{
    char err[256];
    int64_t given[BUCKET_MAX + 1], out = 0, in = 0;
    int slot[BUCKET_MAX + 1] = { BUCKET_HOME }; /* the item's own, then its buckets' */
    struct rp_batch b;
    memcpy(slot + 1, salts, (size_t)k * sizeof(*salts));
    rp_batch_init(&b);
    for (int i = 0; i <= k; i++) {
        char xo[KEYS_MAX], xi[KEYS_MAX];
        if (keys_item_at(xo, sizeof(xo), c->redis.key_prefix, item, slot[i], KEYS_ITEM_XOUT) < 0 ||
            keys_item_at(xi, sizeof(xi), c->redis.key_prefix, item, slot[i], KEYS_ITEM_XIN) < 0 ||
            rp_addf(&b, xo, "HLEN %s", xo) < 0 || rp_addf(&b, xi, "HLEN %s", xi) < 0)
            goto out;
    }
    if (rp_run(rp, &b, err, sizeof(err)) != 0)
        goto out;
    for (int i = 0; i <= k; i++) {
        out += given[i] = count_of(&b, 2 * i);
        in += count_of(&b, 2 * i + 1);
    }
    for (int i = 0; out > in && i <= k; i++) {
        struct xfer_tally t;
        if (given[i] == 0)
            continue;
        if (xfer_finish(rp, c->redis.key_prefix, item, slot[i], true, &t, err, sizeof(err)) != 0)
            log_debug("sweep: item %" PRId64 ": transfers left half done: %s", item, err);
        else
            st->xfer_finished += t.finished;
    }
out:
    rp_batch_free(&b);
}

/* One item: its own slot, then each bucket's, whether its buckets sit on
 * fewer primaries than they could (a reshard moved them), and its
 * transfers left half done. */
static int sweep_item(const struct cfg *c, struct rp *rp, struct pub *p, const struct rfunc *claim,
                      int64_t item, int64_t age_ms, struct sweep_stats *st, char *err, size_t errlen)
{
    int k, salts[BUCKET_MAX];
    if (sweep_slot(c, rp, p, claim, item, BUCKET_HOME, age_ms, st, err, errlen) != 0 ||
        item_buckets(c, rp, item, &k, salts, st, err, errlen) != 0)
        return -1;
    for (int b = 0; k > 1 && b < k; b++) {
        st->buckets++;
        if (sweep_slot(c, rp, p, claim, item, salts[b], age_ms, st, err, errlen) != 0)
            return -1;
    }
    int spread = k > 1 ? bucket_spread(c->redis.key_prefix, item, k, salts, rp_node_fn, rp) : 1;
    if (spread >= 0 && spread < (k < rp_nodes(rp) ? k : rp_nodes(rp)))
        st->crowded++;
    if (k > 1)
        finish_transfers(c, rp, item, k, salts, st);
    return 0;
}

int sweep_once(const struct cfg *c, struct rp *rp, struct pub *p, int64_t age_ms,
               struct sweep_stats *out, char *err, size_t errlen)
{
    char key[KEYS_MAX];
    const struct rfunc claim = RFUNC_INIT("seckill_sweep_claim", &funclib_producer);
    redisReply *items = NULL;
    int ret = -1;
    memset(out, 0, sizeof(*out));
    keys_items(key, sizeof(key), c->redis.key_prefix);
    enum rp_status rst;
    char why[256];
    /* (one set names every item, whichever shard holds the item's keys) */
    items = rp_callf(rp, key, &rst, why, sizeof(why), "SMEMBERS %s", key);
    if (!items || items->type != REDIS_REPLY_ARRAY) {
        snprintf(err, errlen, "redis: SMEMBERS %s: %s", key,
                 !items ? why : items->type == REDIS_REPLY_ERROR ? items->str : "unexpected reply");
        goto fail;
    }
    for (size_t i = 0; i < items->elements; i++) {
        int64_t item;
        if (items->element[i]->type != REDIS_REPLY_STRING ||
            util_parse_i64(items->element[i]->str, 1, INT64_MAX, &item) != 0)
            continue;
        out->items++;
        if (sweep_item(c, rp, p, &claim, item, age_ms, out, err, errlen) != 0)
            goto fail;
    }
    ret = 0;
fail:
    freeReplyObject(items);
    return ret;
}
