#include "xfer.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bucket.h"
#include "keys.h"
#include "util.h"

int xfer_new_id(char id[XFER_ID_MAX])
{
    return util_random_hex(id, (XFER_ID_MAX - 1) / 2);
}

/* Why command i of b has no integer answer, into err. */
static void say_why(const struct rp_batch *b, int i, const char *runerr, const char *what, char *err,
                    size_t errlen)
{
    const redisReply *r = rp_reply(b, i);
    if (r && r->type == REDIS_REPLY_ERROR)
        snprintf(err, errlen, "%s: %s", what, r->str);
    else if (r)
        snprintf(err, errlen, "%s: an answer of type %d, not a number", what, r->type);
    else
        snprintf(err, errlen, "%s: %s%s", what, runerr,
                 rp_status(b, i) == RP_UNKNOWN ? " (the reply was lost: it may have run)" : "");
}

/* One function call of the transfer in a round trip of its own; its integer
 * answer into *out. durable: -1 also when too few replicas hold it. */
static int call(struct rp *p, const char *fn, int nkeys, int nargs, const char **argv, bool durable,
                int64_t *out, const char *what, char *err, size_t errlen)
{
    struct rp_batch b;
    char runerr[256] = "";
    int ret = -1;
    rp_batch_init(&b);
    if (rp_fcall(&b, fn, nkeys, nargs, argv, NULL) < 0) {
        snprintf(err, errlen, "%s: out of memory", what);
        goto fail;
    }
    if (durable)
        rp_durable(&b);
    (void)rp_run(p, &b, runerr, sizeof(runerr));
    const redisReply *r = rp_reply(&b, 0);
    if (!r || r->type != REDIS_REPLY_INTEGER) {
        say_why(&b, 0, runerr, what, err, errlen);
        goto fail;
    }
    if (rp_replicas_short(&b)) {
        snprintf(err, errlen, "%s: fewer than %d replicas hold it (redis.min_replicas_ack)", what,
                 b.wait_replicas);
        goto fail;
    }
    *out = r->integer;
    ret = 0;
fail:
    rp_batch_free(&b);
    return ret;
}

/* The receiving half of transfer id, units into slot `to`. */
static int give_in(struct rp *p, const char *prefix, int64_t item, int to, const char *id, int64_t units,
                   int64_t *applied, char *err, size_t errlen)
{
    char stock[KEYS_MAX], xin[KEYS_MAX], orders[KEYS_MAX], n[24];
    if (keys_item_at(stock, sizeof(stock), prefix, item, to, KEYS_ITEM_STOCK) < 0 ||
        keys_item_at(xin, sizeof(xin), prefix, item, to, KEYS_ITEM_XIN) < 0 ||
        keys_item_at(orders, sizeof(orders), prefix, item, to, KEYS_ITEM_ORDERS) < 0) {
        snprintf(err, errlen, "item %" PRId64 ": its keys do not fit (redis.key_prefix)", item);
        return -1;
    }
    snprintf(n, sizeof(n), "%" PRId64, units);
    const char *argv[] = { stock, xin, orders, id, n };
    if (call(p, "seckill_xfer_in", 3, 2, argv, false, applied, "seckill_xfer_in", err, errlen) != 0)
        return -1;
    if (*applied < 0) {
        snprintf(err, errlen, "item %" PRId64 ": transfer %s: the receiving slot (salt %d) has no stock",
                 item, id, to);
        return -1;
    }
    return 0;
}

int xfer_move(struct rp *p, const char *prefix, const struct xfer *x, int64_t *moved, char *err,
              size_t errlen)
{
    char stock[KEYS_MAX], xout[KEYS_MAX], to[16], want[24], keep[24];
    int64_t given = 0, applied = 0;
    *moved = 0;
    if (x->want < 1 || x->keep < 0 || x->from == x->to) {
        snprintf(err, errlen, "transfer %s: want >= 1, keep >= 0, two different slots", x->id);
        return -1;
    }
    if (keys_item_at(stock, sizeof(stock), prefix, x->item, x->from, KEYS_ITEM_STOCK) < 0 ||
        keys_item_at(xout, sizeof(xout), prefix, x->item, x->from, KEYS_ITEM_XOUT) < 0) {
        snprintf(err, errlen, "item %" PRId64 ": its keys do not fit (redis.key_prefix)", x->item);
        return -1;
    }
    snprintf(to, sizeof(to), "%d", x->to);
    snprintf(want, sizeof(want), "%" PRId64, x->want);
    snprintf(keep, sizeof(keep), "%" PRId64, x->keep);
    const char *argv[] = { stock, xout, x->id, to, want, keep };
    if (call(p, "seckill_xfer_out", 2, 4, argv, true, &given, "seckill_xfer_out", err, errlen) != 0)
        return -1;
    if (given > 0 && give_in(p, prefix, x->item, x->to, x->id, given, &applied, err, errlen) != 0)
        return -1;
    *moved = given;
    return 0;
}

/* A record's "SALT:UNITS". 0, or -1 when it is not one. */
static int parse_record(const char *v, int *salt, int64_t *units)
{
    char buf[64];
    const char *colon = strchr(v, ':');
    int64_t s;
    if (!colon || (size_t)(colon - v) >= sizeof(buf))
        return -1;
    memcpy(buf, v, (size_t)(colon - v));
    buf[colon - v] = '\0';
    if (util_parse_i64(buf, BUCKET_HOME, BUCKET_SALT_TRIES - 1, &s) != 0 ||
        util_parse_i64(colon + 1, 1, INT64_MAX, units) != 0)
        return -1;
    *salt = (int)s;
    return 0;
}

/* The giving half's record of id made durable before its receiving half
 * runs (seckill_xfer_hold: written again, then WAIT): its units, 0 when it
 * is gone, or -1 (too few replicas hold it: not finished now). */
static int hold(struct rp *p, const char *xout, const char *id, int64_t *units, char *err, size_t errlen)
{
    const char *argv[] = { xout, id };
    return call(p, "seckill_xfer_hold", 1, 1, argv, true, units, "seckill_xfer_hold", err, errlen);
}

/* Whether the receiving half of each record of all (HGETALL's id, record
 * pairs; every record parsed into to[]) is recorded in its slot: has[i] for
 * record i, every HEXISTS in one pipelined round trip (on a Redis Cluster,
 * one per primary). 0, or -1 with err. */
static int received(struct rp *p, const char *prefix, int64_t item, const redisReply *all, const int *to,
                    bool *has, char *err, size_t errlen)
{
    struct rp_batch b;
    size_t n = all->elements / 2;
    int ret = -1;
    rp_batch_init(&b);
    for (size_t i = 0; i < n; i++) {
        char xin[KEYS_MAX];
        if (keys_item_at(xin, sizeof(xin), prefix, item, to[i], KEYS_ITEM_XIN) < 0) {
            snprintf(err, errlen, "item %" PRId64 ": its keys do not fit (redis.key_prefix)", item);
            goto fail;
        }
        if (rp_addf(&b, xin, "HEXISTS %s %s", xin, all->element[2 * i]->str) < 0) {
            snprintf(err, errlen, "out of memory");
            goto fail;
        }
    }
    if (n > 0 && rp_run(p, &b, err, errlen) != 0)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        const redisReply *r = rp_reply(&b, (int)i);
        if (!r || r->type != REDIS_REPLY_INTEGER) {
            snprintf(err, errlen, "HEXISTS of transfer %s: %s", all->element[2 * i]->str,
                     r && r->type == REDIS_REPLY_ERROR ? r->str : "no answer");
            goto fail;
        }
        has[i] = r->integer != 0;
    }
    ret = 0;
fail:
    rp_batch_free(&b);
    return ret;
}

/* The records of all (HGETALL's id, record pairs) parsed: to[i], units[i]
 * for record i, counted into out. 0, or -1 with err (one is no
 * "SALT:UNITS"). */
static int parse_all(const redisReply *all, const char *xout, int *to, int64_t *units, struct xfer_tally *out,
                     char *err, size_t errlen)
{
    for (size_t i = 0; i + 1 < all->elements; i += 2) {
        const char *id = all->element[i]->str, *v = all->element[i + 1]->str;
        if (!id || !v || parse_record(v, &to[i / 2], &units[i / 2]) != 0) {
            snprintf(err, errlen, "%s: transfer %s: a record that is no SALT:UNITS", xout, id ? id : "?");
            return -1;
        }
        out->given++;
        out->units += units[i / 2];
    }
    return 0;
}

int xfer_finish(struct rp *p, const char *prefix, int64_t item, int from, bool apply, struct xfer_tally *out,
                char *err, size_t errlen)
{
    char xout[KEYS_MAX], runerr[256] = "";
    redisReply *all = NULL;
    enum rp_status st;
    int *to = NULL, ret = -1;
    int64_t *units = NULL;
    bool *has = NULL;
    memset(out, 0, sizeof(*out));
    if (keys_item_at(xout, sizeof(xout), prefix, item, from, KEYS_ITEM_XOUT) < 0) {
        snprintf(err, errlen, "item %" PRId64 ": its keys do not fit (redis.key_prefix)", item);
        return -1;
    }
    all = rp_callf(p, xout, &st, runerr, sizeof(runerr), "HGETALL %s", xout);
    if (!all || all->type != REDIS_REPLY_ARRAY) {
        snprintf(err, errlen, "HGETALL %s: %s", xout,
                 all && all->type == REDIS_REPLY_ERROR ? all->str : runerr);
        goto fail;
    }
    size_t n = all->elements / 2;
    if (!(to = calloc(n + 1, sizeof(*to))) || !(units = calloc(n + 1, sizeof(*units))) ||
        !(has = calloc(n + 1, sizeof(*has)))) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (parse_all(all, xout, to, units, out, err, errlen) != 0 ||
        received(p, prefix, item, all, to, has, err, errlen) != 0)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        int64_t applied = 0, held = 0;
        const char *id = all->element[2 * i]->str;
        if (has[i])
            continue;
        out->in_flight += units[i];
        if (!apply)
            continue;
        if (hold(p, xout, id, &held, err, errlen) != 0)
            goto fail;
        if (held > 0 && give_in(p, prefix, item, to[i], id, held, &applied, err, errlen) != 0)
            goto fail;
        out->finished += applied;
    }
    ret = 0;
fail:
    free(to);
    free(units);
    free(has);
    if (all)
        freeReplyObject(all);
    return ret;
}
