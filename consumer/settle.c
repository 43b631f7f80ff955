#include "settle.h"

#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bkmap.h"
#include "cmetrics.h"
#include "fifo.h"
#include "funclibs.h"
#include "keys.h"
#include "log.h"
#include "rfunc.h"
#include "rpipe.h"
#include "rstate.h"
#include "util.h"

/* Values per order after seckill_settle's first argument. */
#define SETTLE_ARGS 5
/* Keys per seckill_settle call, and its one leading argument (now). */
#define SETTLE_KEYS 4
/* How often an idle worker retries its backlog. */
#define SETTLE_IDLE_RETRY_MS 1000

struct settle {
    const struct cfg *cfg;
    int id;
    struct rp *rp;        /* its Redis: one node or a Cluster (rpipe.h) */
    struct rp_batch batch;
    struct rfunc settle_fn; /* seckill_settle */
    struct bkmap *bk;       /* the items' buckets: where each reservation is */
    struct rs rs;           /* the marks pending payment (rstate.h) */
    struct log_repeat say_missing; /* the function missing, once while it lasts */
    struct log_repeat say_mark;    /* seckill_mark refused (an error reply), once while it lasts */
    struct log_repeat say_short;   /* the replicas short of min_replicas_ack, once while it lasts */
    struct cmsg **unclear; /* the backlog: settled messages held until their
                            * reservations are cleared, oldest first */
    size_t nunclear, capunclear;
    bool logged;          /* the backlog's warning was logged */
    size_t given_up;      /* reservations dropped beyond the backlog's limit, this outage */
    size_t counted;       /* this backlog's share of the uncleared gauge */
    struct fifo out;      /* cleared (or given up): back to the worker */
    int64_t retry_ms;     /* monotonic: the next idle retry */
    const char **argv; /* room for every order's values and a call's keys */
    char (*vals)[24];  /* SETTLE_ARGS strings per order of the backlog */
    size_t capargs;    /* orders argv and vals have room for */
};

int settle_open(const struct cfg *c, int id, struct settle **out, char *err, size_t errlen)
{
    struct settle *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->cfg = c;
    s->id = id;
    s->settle_fn = (struct rfunc)RFUNC_INIT("seckill_settle", &funclib_consumer);
    rs_init(&s->rs, c);
    fifo_init(&s->out, FIFO_LINK(struct cmsg, next));
    if (!(s->bk = bkmap_new())) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (rp_open(c, cfg_role_self(), &s->rp, err, errlen) != 0)
        goto fail;
    *out = s;
    return 0;
fail:
    bkmap_free(s->bk);
    free(s);
    return -1;
}

void settle_close(struct settle *s)
{
    if (!s)
        return;
    CM_ADD(uncleared, -(int64_t)s->counted);
    rp_batch_free(&s->batch);
    rs_free(&s->rs);
    rp_close(s->rp);
    bkmap_free(s->bk);
    free(s->unclear);
    free(s->argv);
    free(s->vals);
    free(s);
}

/* Give message m back to the worker, to be reported. */
static void hand_back(struct settle *s, struct cmsg *m)
{
    fifo_push(&s->out, m);
}

/* What was handed back since the last call, and the gauge brought up to
 * date with the backlog. */
static struct cmsg *take_out(struct settle *s, size_t *nout)
{
    CM_ADD(uncleared, (int64_t)s->nunclear - (int64_t)s->counted);
    s->counted = s->nunclear;
    return fifo_take_all(&s->out, nout);
}

static int cmp_item(const void *a, const void *b)
{
    const struct cmsg *x = *(struct cmsg *const *)a, *y = *(struct cmsg *const *)b;
    if (x->o.item_id != y->o.item_id)
        return x->o.item_id < y->o.item_id ? -1 : 1;
    return (x->salt > y->salt) - (x->salt < y->salt);
}

/* The item of the backlog's order i (bkmap_learn_rows). */
static int64_t unclear_item(const void *rows, size_t i)
{
    return ((struct cmsg *const *)rows)[i]->o.item_id;
}

/* Each order of the backlog (sorted by item) given the slot its
 * reservation is in (its buyer's bucket, for an item with buckets), the
 * items' buckets learnt (bkmap_learn_rows), then sorted by item and slot.
 * 0, or -1 when an item's buckets are not known (Redis did not answer):
 * settling it in its own slot would leave its bucket's reservation, and
 * write its buyer's state where no status call reads it. */
static int place_backlog(struct settle *s)
{
    int k, salts[BUCKET_MAX];
    (void)bkmap_learn_rows(s->bk, s->rp, s->cfg->redis.key_prefix, s->unclear, s->nunclear, unclear_item);
    for (size_t i = 0; i < s->nunclear; i++) {
        struct cmsg *m = s->unclear[i];
        if (!bkmap_get(s->bk, m->o.item_id, &k, salts))
            return -1;
        m->salt = bkmap_salt(s->bk, m->o.item_id, m->o.user_id);
    }
    qsort(s->unclear, s->nunclear, sizeof(*s->unclear), cmp_item);
    return 0;
}

/* seckill_settle's values of each order: id, user, status letter, reserved at,
 * reason ('' when confirmed). */
static void format_vals(struct cmsg *const *m, size_t n, char (*vals)[24])
{
    for (size_t i = 0; i < n; i++) {
        const struct order *r = &m[i]->o;
        const char *why = cmsg_refusal_reason(m[i]);
        char(*o)[24] = &vals[i * SETTLE_ARGS];
        snprintf(o[0], sizeof(o[0]), "%" PRId64, r->order_id);
        snprintf(o[1], sizeof(o[1]), "%" PRId64, r->user_id);
        snprintf(o[2], sizeof(o[2]), "%c", ost_letter(cmsg_status(m[i]->outcome)));
        snprintf(o[3], sizeof(o[3]), "%" PRId64, r->reserved_at_ms);
        snprintf(o[4], sizeof(o[4]), "%s", why ? why : "");
    }
}

/* Whether one of the orders [i, j) of the backlog is pending payment: its
 * item's seckill_settle call is followed by a seckill_mark call. */
static bool item_waits_payment(const struct settle *s, size_t i, size_t j)
{
    for (size_t m = i; m < j; m++)
        if (s->unclear[m]->pay_by_ms > 0)
            return true;
    return false;
}

/* The end of the run of s->unclear's orders of one item's slot from i on. */
static size_t item_end(const struct settle *s, size_t i)
{
    size_t j = i;
    while (j < s->nunclear && s->unclear[j]->o.item_id == s->unclear[i]->o.item_id &&
           s->unclear[j]->salt == s->unclear[i]->salt)
        j++;
    return j;
}

/* The marks of the orders [i, j) of the backlog (one item) pending
 * payment: OST_PENDING_PAYMENT with their pay_by, one seckill_mark call
 * (rstate.h). 0, or -1 out of memory. */
static int add_pending_marks(struct settle *s, size_t i, size_t j)
{
    for (size_t m = i; m < j; m++) {
        const struct cmsg *c = s->unclear[m];
        struct rs_row row = { c->o.order_id, c->o.item_id, OST_PENDING_PAYMENT, c->pay_by_ms, c->salt };
        if (c->pay_by_ms > 0 && rs_put(&s->rs, &row) != 0)
            return -1;
    }
    return rs_add(&s->rs, &s->batch) == 1 ? 0 : -1;
}

/* Add one seckill_settle call per item slot of s->unclear (sorted by item and slot) to
 * the empty batch, routed by the item's keys: on a Cluster each goes to its
 * item's primary. An item with orders pending payment gets their marks
 * right after (add_pending_marks), on the same key's connection, so in the
 * same round trip and after the settlement they build on (seckill_mark
 * moves a state only forward: pending payment replaces queued or
 * confirmed, never paid, expired or cancelled). 0, or -1 out of memory. */
static int clear_add(struct settle *s)
{
    char k[KEYS_ITEM_PARTS][KEYS_MAX], now[24];
    snprintf(now, sizeof(now), "%" PRId64, util_wall_ms());
    rs_begin(&s->rs);
    for (size_t i = 0, j; i < s->nunclear; i = j) {
        size_t a = 0;
        j = item_end(s, i);
        if (keys_item_all_at(k, s->cfg->redis.key_prefix, s->unclear[i]->o.item_id, s->unclear[i]->salt) != 0)
            return -1;
        s->argv[a++] = k[KEYS_ITEM_PENDING];
        s->argv[a++] = k[KEYS_ITEM_UNPUB];
        s->argv[a++] = k[KEYS_ITEM_ORDERS];
        s->argv[a++] = k[KEYS_ITEM_STOCK];
        s->argv[a++] = now;
        for (size_t m = i; m < j; m++)
            for (int v = 0; v < SETTLE_ARGS; v++)
                s->argv[a++] = s->vals[m * SETTLE_ARGS + (size_t)v];
        if (rp_fcall(&s->batch, s->settle_fn.name, SETTLE_KEYS, (int)(a - SETTLE_KEYS), s->argv, NULL) < 0)
            return -1;
        if (item_waits_payment(s, i, j) && add_pending_marks(s, i, j) != 0)
            return -1;
    }
    return 0;
}

/* Whether seckill_settle call c of the batch answered (an error reply is
 * no answer). */
static bool settled(const struct settle *s, int c)
{
    return rp_status(&s->batch, c) == RP_OK && rp_classify(rp_reply(&s->batch, c)) == RP_REPLY_ANSWER;
}

/* Say once while it lasts that seckill_mark did not answer (the marks
 * pending payment), or that it does again. */
static void say_marks(struct settle *s, const struct rs_said *said)
{
    if (said->missing > 0 || said->why[0]) {
        char why[512];
        if (said->missing > 0)
            rs_missing_text(&s->rs, why, sizeof(why));
        else
            snprintf(why, sizeof(why), "%s", said->why);
        log_repeat(&s->say_mark, LOG_LVL_ERROR, "settle: seckill_mark",
                   "worker %d: redis: seckill_mark (orders pending payment): %s; their reservations wait "
                   "in the backlog (logged once while it lasts)",
                   s->id, why);
    } else if (said->calls > 0 && said->answered == said->calls) {
        log_repeat_end(&s->say_mark, "seckill_mark answered");
    }
}

/* Keep in the backlog only the orders of the items whose call did not
 * answer: no reply, or an error reply (LOADING while Redis reads its AOF
 * back, a function missing). On a Cluster one shard down leaves only its
 * items behind. With redis.min_replicas_ack, a batch whose clears fewer
 * replicas hold than that stays whole (WAIT gives the fewest over the
 * shards written): a failover now would bring the cleared reservations
 * back, persisted orders left "queued" in Redis for good (seen in the
 * Cluster's pause scenario and by the nemesis, issue #32); settle is safe
 * to run again. */
static void clear_keep_failed(struct settle *s)
{
    struct rs_said said;
    size_t kept = 0;
    int c = 0, k = 0;
    if (rp_replicas_short(&s->batch)) {
        log_repeat(&s->say_short, LOG_LVL_WARNING, "settle: replicas short",
                   "worker %d: redis: fewer than %d replicas hold the cleared reservations; they are cleared "
                   "again later (logged once while it lasts)", s->id, s->batch.wait_replicas);
        return;
    }
    log_repeat_end(&s->say_short, "the replicas hold the clears");
    rs_read(&s->rs, &s->batch, &said);
    for (size_t i = 0, j; i < s->nunclear; i = j, c++) {
        j = item_end(s, i);
        bool ok = settled(s, c);
        /* An item's orders stay until Redis has both: the settlement and,
         * for an order pending payment, its mark (both calls are safe to
         * repeat). A message is reported done only then, so a consumer
         * that dies before has Kafka deliver it again, and the duplicate
         * brings its pay_by back (cons_existing.sql). */
        if (item_waits_payment(s, i, j)) {
            ok = rs_done(&s->rs, k++) && ok;
            c++;
        }
        if (ok) {
            for (size_t m = i; m < j; m++)
                hand_back(s, s->unclear[m]);
            continue;
        }
        memmove(&s->unclear[kept], &s->unclear[i], (j - i) * sizeof(*s->unclear));
        kept += j - i;
    }
    s->nunclear = kept;
    say_marks(s, &said);
}

/* Whether a seckill_settle call of the batch was answered "function not
 * found" (a missing seckill_mark is another library's, said apart). */
static bool settle_missing(const struct settle *s)
{
    int c = 0;
    for (size_t i = 0, j; i < s->nunclear; i = j, c++) {
        j = item_end(s, i);
        if (rp_classify(rp_reply(&s->batch, c)) == RP_REPLY_NO_FUNCTION)
            return true;
        c += item_waits_payment(s, i, j);
    }
    return false;
}

/* One try at clearing the backlog: every item's call in one pipelined round
 * trip (per primary on a Cluster). The cleared orders leave the backlog.
 * 0 when none is left, else -1. */
static int clear_try(struct settle *s)
{
    char err[256] = "";
    format_vals(s->unclear, s->nunclear, s->vals);
    rp_batch_reset(&s->batch);
    if (clear_add(s) != 0)
        return -1;
    rp_durable(&s->batch); /* the buyers' states: see clear_keep_failed */
    if (rp_run(s->rp, &s->batch, err, sizeof(err)) != 0)
        log_debug("worker %d: settle: %s", s->id, err);
    /* The consumer never loads code: it says what is missing, keeps the
     * backlog and retries, until an operator loads the library. (A missing
     * seckill_mark is said by clear_keep_failed, which knows which call.) */
    if (s->batch.missing > 0 && settle_missing(s)) {
        char why[512];
        rfunc_missing_text(&s->settle_fn, why, sizeof(why));
        log_repeat(&s->say_missing, LOG_LVL_ERROR, "settle: function missing",
                   "worker %d: redis: %s; reservations wait in the backlog (logged once while it lasts)",
                   s->id, why);
    }
    size_t before = s->nunclear;
    clear_keep_failed(s);
    if (s->batch.missing == 0 && s->nunclear < before)
        log_repeat_end(&s->say_missing, "the settle function answered");
    rp_batch_reset(&s->batch);
    return s->nunclear == 0 ? 0 : -1;
}

/* Append the orders of v[0..n) to the backlog; a message that has nothing
 * to settle in Redis (a cancel: cmsg_status OST_NONE) goes back at once. Out of
 * memory, they are held nowhere: handed back uncleared, as given up. */
static void backlog_add(struct settle *s, struct cmsg *const *v, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (cmsg_status(v[i]->outcome) == OST_NONE)
            hand_back(s, v[i]);
        else
            k++;
    if (k == 0)
        return;
    if (s->nunclear + n > s->capunclear) {
        size_t cap = (s->nunclear + n) * 2;
        struct cmsg **nr = realloc(s->unclear, cap * sizeof(*nr));
        if (!nr) {
            log_error("worker %d: out of memory: %zu reservations of persisted orders left for "
                      "'seckillctl reconcile --fix'", s->id, k);
            for (size_t i = 0; i < n; i++)
                if (cmsg_status(v[i]->outcome) != OST_NONE)
                    hand_back(s, v[i]);
            return;
        }
        s->unclear = nr;
        s->capunclear = cap;
    }
    for (size_t i = 0; i < n; i++)
        if (cmsg_status(v[i]->outcome) != OST_NONE)
            s->unclear[s->nunclear++] = v[i];
}

/* Room in argv and vals for the whole backlog. 0, or -1 out of memory. */
static int reserve_args(struct settle *s)
{
    size_t n = s->nunclear;
    if (n <= s->capargs)
        return 0;
    const char **argv = realloc(s->argv, (n * SETTLE_ARGS + SETTLE_KEYS + 1) * sizeof(*argv));
    if (argv)
        s->argv = argv;
    char(*vals)[24] = realloc(s->vals, n * SETTLE_ARGS * sizeof(*vals));
    if (vals)
        s->vals = vals;
    if (!argv || !vals)
        return -1;
    s->capargs = n;
    return 0;
}

/* Keep the backlog for the next call, within SETTLE_BACKLOG_MAX. */
static void backlog_keep(struct settle *s)
{
    if (!s->logged)
        log_warn("worker %d: could not clear %zu reservations of persisted orders in Redis; "
                 "retrying with the next batches", s->id, s->nunclear);
    s->logged = true;
    if (s->nunclear > SETTLE_BACKLOG_MAX) {
        size_t drop = s->nunclear - SETTLE_BACKLOG_MAX;
        /* Every batch of the outage drops some: said once, totalled at the end. */
        if (!s->given_up)
            log_error("worker %d: giving up clearing reservations of persisted orders beyond %d; "
                      "'seckillctl reconcile --fix' drops them (the total when Redis is back)", s->id,
                      SETTLE_BACKLOG_MAX);
        s->given_up += drop;
        for (size_t i = 0; i < drop; i++)
            hand_back(s, s->unclear[i]);
        memmove(s->unclear, s->unclear + drop, SETTLE_BACKLOG_MAX * sizeof(*s->unclear));
        s->nunclear = SETTLE_BACKLOG_MAX;
    }
}

struct cmsg *settle_clear(struct settle *s, struct cmsg *const *v, size_t n, size_t *nout)
{
    size_t total;
    backlog_add(s, v, n);
    if (s->nunclear == 0)
        goto out;
    if (reserve_args(s) != 0) {
        backlog_keep(s);
        goto out;
    }
    for (size_t i = 0; i < s->nunclear; i++)
        s->unclear[i]->salt = BUCKET_HOME; /* (sorted by item first, for place_backlog) */
    qsort(s->unclear, s->nunclear, sizeof(*s->unclear), cmp_item);
    if (place_backlog(s) != 0) {
        CM_ADD(redis_errors, 1);
        backlog_keep(s);
        goto out;
    }
    total = s->nunclear;
    /* Once more for what is left: the script is safe to repeat, and rpipe
     * opens a new connection where the old one broke (a dropped connection
     * is the common case; a Redis that is down fails at once, in its
     * reconnect backoff). */
    if (clear_try(s) != 0) {
        CM_ADD(redis_errors, 1);
        if (clear_try(s) != 0) {
            CM_ADD(redis_errors, 1);
            backlog_keep(s);
            goto out;
        }
    }
    if (s->logged)
        log_notice("worker %d: cleared %zu reservations left over from a Redis outage", s->id, total);
    if (s->given_up)
        log_notice("worker %d: gave up clearing %zu reservations during the outage; "
                   "'seckillctl reconcile --fix' drops them", s->id, s->given_up);
    s->logged = false;
    s->given_up = 0;
out:
    return take_out(s, nout);
}

size_t settle_backlog(const struct settle *s) { return s->nunclear; }

struct cmsg *settle_idle(struct settle *s, size_t *nout)
{
    if (s->nunclear == 0 || util_mono_ms() < s->retry_ms)
        return take_out(s, nout);
    s->retry_ms = util_mono_ms() + SETTLE_IDLE_RETRY_MS;
    return settle_clear(s, NULL, 0, nout);
}

struct cmsg *settle_abandon(struct settle *s, size_t *nout)
{
    for (size_t i = 0; i < s->nunclear; i++)
        hand_back(s, s->unclear[i]);
    s->nunclear = 0;
    return take_out(s, nout);
}
