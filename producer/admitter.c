#include "admitter.h"

#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "admctl.h"
#include "bgthread.h"
#include "daemon.h"
#include "keys.h"
#include "log.h"
#include "metrics.h"
#include "pmetrics.h"
#include "qfeed.h"
#include "rlink.h"
#include "rpipe.h"
#include "util.h"

/* A seed: 32 bytes from the CSPRNG, in hex. */
#define SEED_BYTES 32
/* Replies of seckill_queue_admit: {holder, admitted, passed, waiting, stock,
 * pending, outstanding, serving, ceiling_per_s, paused, lapsed,
 * eta_err_ms_sum, eta_err_n, shuffled, pre}. */
enum { R_HOLDER, R_ADMITTED, R_PASSED, R_WAITING, R_STOCK, R_PENDING, R_OUTSTANDING, R_SERVING, R_CEILING,
       R_PAUSED, R_LAPSED, R_ERR_SUM, R_ERR_N, R_SHUFFLED, R_PRE, R_N };
/* Accepted buys in a control period below which their p99 says nothing. */
#define P99_MIN_SAMPLES 20
/* How long past an admission's life a room's serving number may stand still
 * before it counts as stalled: a healthy room stands at most until its
 * admissions outstanding are spent or run out, then the next step moves it
 * (at 1 admission a second, the least rate, within a second). */
#define STALL_GRACE_MS 5000

/* One item with a waiting room. */
struct item {
    int64_t id, starts_ms, ends_ms;
    int placed;    /* the line is whole (the opening is over) */
    int seed_said; /* its seed was logged */
    int listed;    /* in the last listing */
    struct actl ctl;
    double carry;       /* a fraction of an admission, for the next step */
    struct actl_avg measured; /* admissions a second (holder only) */
    int64_t last_ms;     /* the last step (monotonic) */
    int64_t r[R_N];      /* the last step's reply */
    /* For the stalled gauge: the serving number last seen, since when
     * (monotonic; 0: not counting). */
    int64_t still_serving, still_since_ms;
    struct qf_read read; /* its line, while this producer's copy reads it */
};

struct adt {
    const struct cfg *cfg;
    struct rlink link;
    struct bgthread t;
    char owner[96]; /* this producer, in the leases */
    struct item *items;
    size_t n;
    struct rp_batch b;
    int64_t next_list_ms, next_control_ms;
    int64_t admitted; /* admissions since the last control period, all items */
    struct metrics_hist_snap snap;
    struct log_repeat say_fail;
    struct qfeed feed; /* the copy the HTTP thread answers asks from */
};

/* --- the items with a room ------------------------------------------------ */

static struct item *find(struct adt *a, int64_t id)
{
    for (size_t i = 0; i < a->n; i++)
        if (a->items[i].id == id)
            return &a->items[i];
    return NULL;
}

/* An item the listing found with a room: kept (its state, unless it is a
 * new sale: another opening), or added. */
static void keep(struct adt *a, int64_t id, int64_t starts, int64_t ends)
{
    struct item *it = find(a, id);
    if (it && it->starts_ms != starts) {
        qf_read_drop(&it->read);
        memset(it, 0, sizeof(*it));
    }
    if (!it) {
        if (a->n == ADT_ITEMS_MAX)
            return;
        it = &a->items[a->n++];
        memset(it, 0, sizeof(*it));
    }
    it->id = id;
    it->starts_ms = starts;
    it->ends_ms = ends;
    it->listed = 1;
}

/* Field i of an HMGET reply as ms; 0 when absent or not a number. */
static int64_t field_ms(const redisReply *r, size_t i)
{
    int64_t v = 0;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements > i && r->element[i]->type == REDIS_REPLY_STRING &&
        util_parse_i64(r->element[i]->str, 1, INT64_MAX, &v) != 0)
        v = 0;
    return v;
}

/* The items registry, then each item's window: which have a room. */
static void list_items(struct adt *a)
{
    char key[KEYS_MAX], win[KEYS_MAX];
    redisReply *ids;
    int64_t *id = NULL;
    const char *argv[2] = { "SMEMBERS", key };
    keys_items(key, sizeof(key), a->cfg->redis.key_prefix);
    if (!(ids = rlink_call(&a->link, key, 2, argv)))
        return;
    rp_batch_reset(&a->b);
    if (ids->type != REDIS_REPLY_ARRAY || !(id = malloc((ids->elements + 1) * sizeof(*id))))
        goto out;
    for (size_t i = 0; i < ids->elements; i++) {
        const redisReply *e = ids->element[i];
        if (e->type != REDIS_REPLY_STRING || util_parse_i64(e->str, 1, INT64_MAX, &id[a->b.n]) != 0 ||
            keys_item(win, sizeof(win), a->cfg->redis.key_prefix, id[a->b.n], KEYS_ITEM_WINDOW) < 0 ||
            rp_addf(&a->b, win, "HMGET %s starts_ms ends_ms " KEYS_WINDOW_QUEUE, win) < 0)
            continue;
    }
    if (rlink_run(&a->link, &a->b) != 0 && a->link.down)
        goto out;
    for (size_t i = 0; i < a->n; i++)
        a->items[i].listed = 0;
    for (int i = 0; i < a->b.n; i++) {
        const redisReply *r = rp_reply(&a->b, i);
        if (field_ms(r, 2) && field_ms(r, 0))
            keep(a, id[i], field_ms(r, 0), field_ms(r, 1));
    }
    /* Drop the ones gone (created again without a room, or removed). */
    for (size_t i = 0; i < a->n;)
        if (!a->items[i].listed) {
            qc_forget(a->feed.v, a->items[i].id);
            qf_read_drop(&a->items[i].read);
            a->items[i] = a->items[--a->n];
        } else
            i++;
out:
    free(id);
    freeReplyObject(ids);
}

/* --- the opening ------------------------------------------------------------ */

/* One seckill_queue_open call: 1 the line is whole, 0 more to move, -1 not
 * yet, failed or no room. */
static int open_once(struct adt *a, struct item *it, const char *seed)
{
    char k[KEYS_QUEUE_PARTS][KEYS_MAX], win[KEYS_MAX], chunk[16];
    const char *prefix = a->cfg->redis.key_prefix;
    if (keys_queue_all(k, prefix, it->id) != 0 ||
        keys_item(win, sizeof(win), prefix, it->id, KEYS_ITEM_WINDOW) < 0)
        return -1;
    snprintf(chunk, sizeof(chunk), "%d", ADT_OPEN_CHUNK);
    const char *argv[] = { win, k[KEYS_QUEUE_META], k[KEYS_QUEUE_PRE], k[KEYS_QUEUE_LINE], seed, chunk };
    rp_batch_reset(&a->b);
    if (rp_fcall(&a->b, "seckill_queue_open", 4, 2, argv, NULL) < 0)
        return -1;
    (void)rlink_run(&a->link, &a->b);
    const redisReply *r = rp_reply(&a->b, 0);
    int64_t code = 0, drawn = 0, left = 0;
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 1 || r->element[0]->type != REDIS_REPLY_INTEGER)
        return -1;
    code = r->element[0]->integer;
    if (code != 1 || r->elements != 5 || r->element[1]->type != REDIS_REPLY_STRING)
        return -1;
    drawn = r->element[2]->integer;
    left = r->element[4]->integer;
    if (!it->seed_said) {
        /* Logged by every producer, once: the seed stored is the order. */
        log_notice("queue: item %" PRId64 " opens: seed %s, %s; seckillctl queue audit --item %" PRId64
                   " recomputes the order from it",
                   it->id, r->element[1]->str, drawn ? "drawn here" : "drawn by another producer", it->id);
        it->seed_said = 1;
    }
    return left == 0 ? 1 : 0;
}

/* At starts_ms (a second early by this host's clock: Redis's decides) open
 * the items that are due, a chunk per call until each line is whole. */
static void open_due(struct adt *a)
{
    char seed[2 * SEED_BYTES + 1];
    int64_t now = util_wall_ms();
    for (size_t i = 0; i < a->n; i++) {
        struct item *it = &a->items[i];
        if (it->placed || now < it->starts_ms - 1000 || !rlink_ok(&a->link))
            continue;
        if (util_random_hex(seed, SEED_BYTES) != 0) {
            log_error("queue: item %" PRId64 ": no randomness for its seed (getrandom)", it->id);
            continue;
        }
        /* Bounded per tick: the admission steps of the other items wait. */
        for (int calls = 0; calls < 100; calls++) {
            int r = open_once(a, it, seed);
            if (r != 0) {
                it->placed = r == 1;
                break;
            }
        }
    }
}

/* --- admission ---------------------------------------------------------------- */

/* The item's ceiling: its own (seckillctl queue rate), or the setting. */
static double ceiling_of(const struct adt *a, const struct item *it)
{
    return it->r[R_CEILING] > 0 ? (double)it->r[R_CEILING] : CFG_GET(a->cfg->producer.queue_rate_per_s);
}

/* This step's budget for it: its rate's share of the time since its last
 * step, the fraction carried over. */
static int64_t budget(struct item *it, int64_t now_ms)
{
    int64_t dt = it->last_ms ? now_ms - it->last_ms : ADT_TICK_MS;
    if (dt > 1000)
        dt = 1000;
    double want = it->ctl.rate_per_s * (double)dt / 1000.0 + it->carry;
    int64_t n = (int64_t)want; /* want >= 0: the floor */
    it->carry = want - (double)n;
    return n;
}

/* The rate the waiters' ETAs are computed from, per 1000 s: the one
 * measured, once measured for long enough; before, the one aimed at. */
static int64_t eta_rate_milli(const struct item *it)
{
    double r = actl_avg_rate(&it->measured, 2000);
    if (r < 0)
        r = it->ctl.rate_per_s;
    return (int64_t)(r * 1000.0);
}

static int add_step(struct adt *a, struct item *it, int64_t now_ms)
{
    char ik[KEYS_ITEM_PARTS][KEYS_MAX], qk[KEYS_QUEUE_PARTS][KEYS_MAX];
    char n[24], life[24], away[24], margin[24], limit[24], rate[24], lease[24];
    const char *prefix = a->cfg->redis.key_prefix;
    const struct cfg *c = a->cfg;
    if (keys_item_all(ik, prefix, it->id) != 0 || keys_queue_all(qk, prefix, it->id) != 0)
        return -1;
    if (it->ctl.rate_per_s <= 0)
        it->ctl.rate_per_s = ceiling_of(a, it);
    int64_t want = budget(it, now_ms);
    snprintf(n, sizeof(n), "%" PRId64, want);
    snprintf(life, sizeof(life), "%lld", (long long)CFG_GET(c->producer.queue_token_life_s) * 1000);
    snprintf(away, sizeof(away), "%lld", (long long)CFG_GET(c->producer.queue_abandon_s) * 1000);
    snprintf(margin, sizeof(margin), "%d", CFG_GET(c->producer.queue_margin_pct));
    snprintf(limit, sizeof(limit), "%" PRId64, want * 4 + 100 > 20000 ? 20000 : want * 4 + 100);
    snprintf(rate, sizeof(rate), "%" PRId64, eta_rate_milli(it));
    snprintf(lease, sizeof(lease), "%d", ADT_LEASE_MS);
    const char *argv[] = { ik[KEYS_ITEM_STOCK],  ik[KEYS_ITEM_PENDING], ik[KEYS_ITEM_WINDOW],
                           qk[KEYS_QUEUE_META],  qk[KEYS_QUEUE_LINE],  qk[KEYS_QUEUE_SEEN],
                           qk[KEYS_QUEUE_ADM],   qk[KEYS_QUEUE_USED],  qk[KEYS_QUEUE_PRE],
                           a->owner, lease, n, life, away, margin, limit, rate };
    return rp_fcall(&a->b, "seckill_queue_admit", 9, 8, argv, NULL) < 0 ? -1 : 0;
}

/* One step's reply into it, the counters, and the measured rate. */
static void took_step(struct adt *a, struct item *it, const redisReply *r, int64_t now_ms)
{
    int64_t dt = it->last_ms ? now_ms - it->last_ms : ADT_TICK_MS;
    it->last_ms = now_ms;
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != R_N)
        return;
    for (int i = 0; i < R_N; i++)
        it->r[i] = r->element[i]->type == REDIS_REPLY_INTEGER ? r->element[i]->integer : 0;
    /* Redis says, every step: an opening lost with a failover (a replica
     * that had not seen it took over) is done again, not taken as done. */
    it->placed = it->r[R_SHUFFLED] != 0;
    if (!it->r[R_HOLDER]) {
        /* Another producer admits: a takeover starts afresh. */
        it->ctl.rate_per_s = 0;
        it->measured = (struct actl_avg){ 0 };
        it->carry = 0;
        return;
    }
    PM_ADD(queue_admitted, it->r[R_ADMITTED]);
    a->admitted += it->r[R_ADMITTED];
    PM_ADD(queue_passed, it->r[R_PASSED]);
    PM_ADD(queue_lapsed, it->r[R_LAPSED]);
    PM_ADD(queue_eta_error_ms, it->r[R_ERR_SUM]);
    PM_ADD(queue_eta_checks, it->r[R_ERR_N]);
    if (it->placed && dt > 0)
        actl_avg_add(&it->measured, (double)it->r[R_ADMITTED] * 1000.0 / (double)dt, dt, ADT_RATE_WINDOW_MS);
}

/* The copy of it (qcopy.h) after a step: the step's reply and the queue
 * hash's fields beside it (qfeed.h), then its line if the copy lacks it. */
static void feed(struct adt *a, struct item *it, const redisReply *meta, int64_t now)
{
    int64_t stock = it->r[R_STOCK], margin = CFG_GET(a->cfg->producer.queue_margin_pct);
    struct qc_state s = { .starts_ms = it->starts_ms,
                          .ends_ms = it->ends_ms,
                          .stock = stock,
                          .outstanding = it->r[R_OUTSTANDING],
                          /* as seckill_queue_admit's room */
                          .callable = stock + (stock * margin + 99) / 100 - it->r[R_OUTSTANDING],
                          .placed = it->r[R_SHUFFLED] != 0 };
    qf_meta(meta, &s);
    qf_step(&a->feed, &a->link, &it->read, it->id, &s, now);
}

/* One round trip: the asks the copy answered (written first: the steps
 * read them), one step per item, and the queue hash's fields of each. */
static void admit_all(struct adt *a)
{
    int64_t now = util_mono_ms();
    size_t at[ADT_ITEMS_MAX], m = 0;
    if (a->n == 0 || !rlink_ok(&a->link))
        return;
    rp_batch_reset(&a->b);
    (void)qf_seen_add(&a->feed, &a->b);
    int base = a->b.n;
    for (size_t i = 0; i < a->n; i++)
        if (add_step(a, &a->items[i], now) == 0)
            at[m++] = i;
    for (size_t j = 0; j < m; j++)
        if (qf_meta_add(&a->feed, &a->b, a->items[at[j]].id) != 0)
            return; /* every step has its fields beside it, or none runs */
    (void)rlink_run(&a->link, &a->b);
    qf_seen_ran(&a->feed, &a->b);
    int failed = 0;
    for (size_t j = 0; j < m; j++) {
        const redisReply *r = rp_reply(&a->b, base + (int)j);
        if (r && r->type == REDIS_REPLY_ARRAY)
            rlink_worked(&a->link);
        else
            failed++;
        took_step(a, &a->items[at[j]], r, now);
    }
    /* After the batch's replies are read: a line's pages are calls of their own. */
    for (size_t j = 0; j < m; j++) {
        const redisReply *r = rp_reply(&a->b, base + (int)j);
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements == R_N)
            feed(a, &a->items[at[j]], rp_reply(&a->b, base + (int)(m + j)), now);
    }
    if (failed)
        log_repeat(&a->say_fail, LOG_LVL_WARNING, "queue: admission steps fail",
                   "queue: %d of %zu admission steps failed (Redis, or the producer's functions); retried "
                   "every %d ms (said once while it lasts)", failed, m, ADT_TICK_MS);
    else
        log_repeat_end(&a->say_fail, "a step worked");
}

/* --- the loop ------------------------------------------------------------------- */

/* Every ACTL_PERIOD_MS: the accepted buys' p99 since the last period, and
 * one step of each admitting item's rate. */
static void control(struct adt *a)
{
    struct metrics_hist_snap now;
    const struct cfg *c = a->cfg;
    metrics_hist_snapshot(&pm.latency_accepted, &now);
    int64_t p99 = metrics_hist_quantile_us(&a->snap, &now, 0.99, P99_MIN_SAMPLES);
    int64_t buys = (int64_t)metrics_hist_count(&a->snap, &now);
    a->snap = now;
    for (size_t i = 0; i < a->n; i++) {
        struct item *it = &a->items[i];
        if (!it->r[R_HOLDER] || !it->placed)
            continue;
        struct actl_in in = { .ceiling_per_s = ceiling_of(a, it),
                              .p99_us = p99,
                              .buys = buys,
                              .admitted = a->admitted,
                              .target_us = (int64_t)CFG_GET(c->producer.queue_p99_target_ms) * 1000,
                              .backlog = it->r[R_PENDING],
                              .backlog_max = CFG_GET(c->producer.queue_backlog_max) };
        if (actl_step(&it->ctl, &in) == ACTL_DOWN)
            PM_INC(queue_rate_down);
    }
    a->admitted = 0;
}

/* Whether it is stalled, by this producer's view of it: waiters and units
 * left, its sale open and not paused, and its serving number still for
 * longer than an admission lives plus STALL_GRACE_MS. The view is the last
 * reply that came, so when no step works (no producer admits, Redis or the
 * functions refuse) it stands still and counts as stalled too. Observes
 * only: what the room does is the steps'. */
static int stalled(const struct adt *a, struct item *it, int64_t mono_ms, int64_t wall_ms)
{
    int could = it->r[R_WAITING] + it->r[R_PRE] > 0 && it->r[R_STOCK] > 0 && !it->r[R_PAUSED] &&
                wall_ms >= it->starts_ms && (!it->ends_ms || wall_ms < it->ends_ms);
    if (!could || !it->still_since_ms || it->r[R_SERVING] != it->still_serving) {
        it->still_serving = it->r[R_SERVING];
        it->still_since_ms = could ? mono_ms : 0;
        return 0;
    }
    int64_t life_ms = (int64_t)CFG_GET(a->cfg->producer.queue_token_life_s) * 1000;
    return mono_ms - it->still_since_ms > life_ms + STALL_GRACE_MS;
}

static void gauges(struct adt *a)
{
    int64_t waiting = 0, pre = 0, serving = 0, out = 0, rate = 0, leases = 0, paused = 0, stalls = 0;
    int64_t floors = 0, mono = util_mono_ms(), wall = util_wall_ms();
    for (size_t i = 0; i < a->n; i++) {
        struct item *it = &a->items[i];
        waiting += it->r[R_WAITING] + it->r[R_PRE];
        pre += it->r[R_PRE];
        serving += it->r[R_SERVING];
        out += it->r[R_OUTSTANDING];
        paused += it->r[R_PAUSED];
        stalls += stalled(a, it, mono, wall);
        if (it->r[R_HOLDER]) {
            leases++;
            rate += (int64_t)it->ctl.rate_per_s;
            floors += it->placed && actl_at_floor(&it->ctl, ceiling_of(a, it));
        }
    }
    PM_SET(queue_items, (int64_t)a->n);
    PM_SET(queue_waiting, waiting);
    PM_SET(queue_prequeue, pre);
    PM_SET(queue_serving, serving);
    PM_SET(queue_outstanding, out);
    PM_SET(queue_rate, rate);
    PM_SET(queue_leases, leases);
    PM_SET(queue_paused, paused);
    PM_SET(queue_stalled, stalls);
    PM_SET(queue_floor, floors);
}

static void *adt_main(void *arg)
{
    struct adt *a = arg;
    daemon_signals_block_thread();
    while (!bgt_stopping(&a->t)) {
        int64_t now = util_mono_ms();
        if (now >= a->next_list_ms && rlink_ok(&a->link)) {
            list_items(a);
            a->next_list_ms = now + 1000;
        }
        open_due(a);
        admit_all(a);
        if (now >= a->next_control_ms) {
            control(a);
            a->next_control_ms = now + ACTL_PERIOD_MS;
        }
        gauges(a);
        bgt_sleep_ms(&a->t, ADT_TICK_MS);
    }
    return NULL;
}

int adt_start(const struct cfg *c, struct qcopy *v, struct adt **out, char *err, size_t errlen)
{
    char host[64] = "", rnd[9];
    struct adt *a = calloc(1, sizeof(*a));
    if (!a || !(a->items = calloc(ADT_ITEMS_MAX, sizeof(*a->items))) ||
        qf_init(&a->feed, v, c->redis.key_prefix) != 0) {
        if (a)
            qf_free(&a->feed);
        free(a ? a->items : NULL);
        free(a);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    a->cfg = c;
    gethostname(host, sizeof(host) - 1);
    if (util_random_hex(rnd, 4) != 0)
        snprintf(rnd, sizeof(rnd), "0");
    snprintf(a->owner, sizeof(a->owner), "%s:%d:%s", host, (int)getpid(), rnd);
    a->link = (struct rlink){ .cfg = c, .what = "queue admissions", .meanwhile = "nobody is admitted" };
    if (rlink_open(&a->link, err, errlen) != 0)
        err[0] = '\0';
    metrics_hist_snapshot(&pm.latency_accepted, &a->snap);
    if (bgt_start(&a->t, adt_main, a) != 0) {
        snprintf(err, errlen, "cannot start the waiting room's admission thread");
        rlink_close(&a->link);
        qf_free(&a->feed);
        free(a->items);
        free(a);
        return -1;
    }
    *out = a;
    return 0;
}

void adt_stop(struct adt *a)
{
    if (!a)
        return;
    bgt_stop(&a->t);
    rlink_close(&a->link);
    rp_batch_free(&a->b);
    for (size_t i = 0; i < a->n; i++)
        qf_read_drop(&a->items[i].read);
    qf_free(&a->feed);
    free(a->items);
    free(a);
}
