#include "ctlrp.h"

#include <inttypes.h>
#include <stdio.h>

#include "keys.h"

struct rp *ctlrp_open(const struct cfg *c)
{
    char err[512];
    struct rp *p = NULL;
    if (rp_open(c, cfg_role_self(), &p, err, sizeof(err)) != 0) {
        fprintf(stderr, "seckillctl: %s\n", err);
        return NULL;
    }
    return p;
}

void ctlrp_say_short(const struct rp_batch *b, const char *what)
{
    fprintf(stderr,
            "seckillctl: redis: %s: fewer than %d replicas confirmed it (redis.min_replicas_ack); run the "
            "command again\n",
            what, b->wait_replicas);
}

const char *ctlrp_why(const struct rp_batch *b, int i, const char *runerr, char *buf, size_t len)
{
    const redisReply *r = rp_reply(b, i);
    buf[0] = '\0';
    if (rp_status(b, i) == RP_UNKNOWN)
        snprintf(buf, len, "%s (the reply was lost: the command may have run)", runerr);
    else if (rp_status(b, i) == RP_NOT_SENT)
        snprintf(buf, len, "%s (not sent)", runerr);
    else if (r->type == REDIS_REPLY_ERROR)
        snprintf(buf, len, "%s", r->str);
    return buf;
}

int ctlrp_run_all(struct rp *p, struct rp_batch *b, const char *what)
{
    char err[256], why[512];
    (void)rp_run(p, b, err, sizeof(err));
    for (int i = 0; i < b->n; i++) {
        if (ctlrp_why(b, i, err, why, sizeof(why))[0]) {
            fprintf(stderr, "seckillctl: redis: %s: %s\n", what, why);
            return -1;
        }
    }
    return 0;
}

int ctlrp_run_durable(struct rp *p, struct rp_batch *b, const char *what)
{
    rp_durable(b);
    if (ctlrp_run_all(p, b, what) != 0)
        return -1;
    if (rp_replicas_short(b)) {
        ctlrp_say_short(b, what);
        return -1;
    }
    return 0;
}

/* One command's batch, run durable; out of memory said as such. */
static int run_one(struct rp *p, struct rp_batch *b, int added, const char *what)
{
    int ret = -1;
    if (added < 0)
        fprintf(stderr, "seckillctl: redis: %s: out of memory\n", what);
    else
        ret = ctlrp_run_durable(p, b, what);
    rp_batch_free(b);
    return ret;
}

int ctlrp_pay_window(struct rp *p, const char *window_key, int64_t pay_within_s)
{
    char v[24];
    struct rp_batch b;
    if (pay_within_s <= 0)
        return 0;
    snprintf(v, sizeof(v), "%" PRId64, pay_within_s);
    rp_batch_init(&b);
    return run_one(p, &b, rp_addf(&b, window_key, "HSET %s %s %s", window_key, KEYS_WINDOW_PAY, v),
                   "setting the item's payment window");
}

int ctlrp_pause_window(struct rp *p, const char *window_key, bool paused)
{
    struct rp_batch b;
    rp_batch_init(&b);
    int i = paused ? rp_addf(&b, window_key, "HSET %s %s 1", window_key, KEYS_WINDOW_PAUSED)
                   : rp_addf(&b, window_key, "HDEL %s %s", window_key, KEYS_WINDOW_PAUSED);
    return run_one(p, &b, i, paused ? "pausing the sale" : "resuming the sale");
}

int ctlrp_queue_window(struct rp *p, const struct cfg *c, int64_t item_id, int64_t opens_ms, bool reset)
{
    char v[24], win[KEYS_MAX], q[KEYS_QUEUE_PARTS][KEYS_MAX];
    const char *argv[1 + KEYS_QUEUE_PARTS] = { "DEL" };
    struct rp_batch b;
    int i = 0;
    if (!reset && opens_ms <= 0)
        return 0;
    rp_batch_init(&b);
    if (keys_item(win, sizeof(win), c->redis.key_prefix, item_id, KEYS_ITEM_WINDOW) < 0 ||
        keys_queue_all(q, c->redis.key_prefix, item_id) != 0) {
        fprintf(stderr, "seckillctl: redis: item %" PRId64 ": its keys do not fit (redis.key_prefix)\n",
                item_id);
        rp_batch_free(&b);
        return -1;
    }
    for (int k = 0; k < KEYS_QUEUE_PARTS; k++)
        argv[1 + k] = q[k];
    /* (one slot: the item's hash tag) */
    if (reset)
        i = rp_add(&b, q[0], 1 + KEYS_QUEUE_PARTS, argv, NULL);
    snprintf(v, sizeof(v), "%" PRId64, opens_ms);
    if (i >= 0 && opens_ms > 0)
        i = rp_addf(&b, win, "HSET %s %s %s", win, KEYS_WINDOW_QUEUE, v);
    return run_one(p, &b, i, "setting the item's waiting room");
}

redisReply *ctlrp_fcall(struct rp *p, const struct rfunc *f, bool durable, int nkeys, int nargs,
                        const char **argv, int type)
{
    struct rp_batch b;
    char err[512], why[512];
    redisReply *r = NULL;
    rp_batch_init(&b);
    int i = rp_fcall(&b, f->name, nkeys, nargs, argv, NULL);
    if (i < 0) {
        fprintf(stderr, "seckillctl: redis: out of memory\n");
        goto out;
    }
    if (durable)
        rp_durable(&b);
    (void)rp_run(p, &b, err, sizeof(err));
    const redisReply *got = rp_reply(&b, i);
    if (got != NULL && got->type == type && rp_replicas_short(&b)) {
        fprintf(stderr,
                "seckillctl: redis: %s ran, but fewer than %d replicas confirmed it "
                "(redis.min_replicas_ack): a failover now could lose it; run the command again\n",
                f->name, b.wait_replicas);
    } else if (got != NULL && got->type == type) {
        r = rp_take(&b, i);
    } else if (got != NULL) {
        /* An answer, but not the one wanted: missing, an error, or garbage. */
        fprintf(stderr, "seckillctl: redis: %s\n", rfunc_error_text(f, NULL, got, why, sizeof(why)));
    } else {
        fprintf(stderr, "seckillctl: redis: %s: %s\n", f->name, ctlrp_why(&b, i, err, why, sizeof(why)));
    }
out:
    rp_batch_free(&b);
    return r;
}
