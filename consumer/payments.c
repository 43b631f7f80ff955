#include "payments.h"

#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bgthread.h"
#include "bkmap.h"
#include "cmetrics.h"
#include "embed.h"
#include "i64map.h"
#include "kloop.h"
#include "log.h"
#include "paytxn.h"
#include "paywait.h"
#include "rstate.h"
#include "ulocks.h"
#include "util.h"

/* Payments held at once to be applied (fetched and not looked up yet, or
 * held back while a service is down); beyond it fetching pauses until some
 * are done. The payments waiting for their orders are not counted: they have
 * a bound of their own (paywait.h). */
#define PAY_HELD_MAX 10000
/* Late payments are said in one line per period at most, with how many came
 * since: one line each would flood the log in a burst. */
#define PAY_SAY_LATE_MS 10000
/* Messages taken per turn before the held payments are tried again: two
 * full batches. */
#define PAY_BURST 2048
/* A service down: nothing is tried for this long, doubling to the cap. */
#define PAY_BACKOFF_BASE_MS 100
#define PAY_BACKOFF_CAP_MS 5000
/* The user's lock held elsewhere, or a stale fence: tried again this soon. */
#define PAY_BUSY_MS 20
/* Tries of a batch's marks: the second on a fresh connection (mark_paid). */
#define PAY_MARK_TRIES 2
/* At a stop, how long dead letters sent may take to be acknowledged. */
#define PAY_STOP_LETTERS_MS 5000
/* Batches per turn of the thread before it fetches and stores offsets again. */
#define PAY_TURN_BATCHES 8

struct payments {
    const struct cfg *cfg;
    struct bgthread t;
    struct kloop *k;   /* the consumer, its offsets, its dead letters (kloop.h) */
    char group[512];   /* <consumer.group_id>.payments */
    struct pw w;       /* the payments held: fresh, waiting, ready (paywait.h) */
    struct paytxn txn; /* a batch's transaction (paytxn.h) */
    int64_t hold_until, next_due; /* monotonic */
    int fails;                    /* service failures in a row: the backoff's exponent */
    struct log_summary said_late;
    struct pgsess pg;
    struct pgtrip trip;
    /* The session's statements: the transaction's, then the look-up's. */
    struct pgsess_stmt stmts[PT_NSTMTS + PW_NSTMTS];
    char idle_ms[24]; /* the session's idle_in_transaction_session_timeout */
    struct rp *rp;
    struct rp_batch batch;
    struct rs rs; /* the paid orders' states (rstate.h) */
    struct bkmap *bk; /* the items' buckets: a paid order is marked in its buyer's */
    /* The batch under way: one payment per user (b[i], its slot txn.s[i]),
     * the users (user i's lock is ul's i). */
    struct pay *b[PT_BATCH];
    size_t nb;
    int64_t uids[PT_BATCH];
    struct ul_batch ul;
    struct i64map users, orders; /* picking: whose payments wait */
    struct log_repeat say_pg, say_redis, say_mark;
};

/* --- Redis ------------------------------------------------------------------------ */

/* Whether the batch's payment i is to be marked paid in Redis. */
static bool to_mark(const struct payments *p, size_t i)
{
    return p->txn.s[i].res == PT_DONE && p->txn.s[i].d.mark;
}

/* The items of the batch's orders to mark, their buckets learnt (bkmap.h)
 * in one round trip on p->rp. */
static void learn_items(struct payments *p)
{
    int64_t items[PT_BATCH];
    size_t n = 0;
    for (size_t i = 0; i < p->nb; i++)
        if (to_mark(p, i))
            items[n++] = p->txn.s[i].d.item_id;
    (void)bkmap_learn(p->bk, p->rp, p->cfg->redis.key_prefix, items, n);
}

/* The orders of the batch paid (now, or before by the same payment) into
 * p->batch: one seckill_mark call per item and slot (rstate.h), for a
 * sale's payments are mostly for one item, and one call marking them all
 * costs Redis far less than one call each. An order of an item with buckets
 * is marked in its buyer's bucket (the payment's user is the order's:
 * pay_apply.sql); an item whose buckets could not be learnt waits, for a
 * mark in the item's own slot would be read by no status call. How many
 * calls, or -1 with err. */
static int add_paid_marks(struct payments *p, char *err, size_t errlen)
{
    int k, salts[BUCKET_MAX];
    rp_batch_reset(&p->batch);
    rs_begin(&p->rs);
    learn_items(p);
    for (size_t i = 0; i < p->nb; i++) {
        const struct pt_slot *y = &p->txn.s[i];
        if (!to_mark(p, i))
            continue;
        if (!bkmap_get(p->bk, y->d.item_id, &k, salts)) {
            snprintf(err, errlen, "item %" PRId64 ": its buckets could not be read", y->d.item_id);
            return -1;
        }
        struct rs_row row = { y->m->order_id, y->d.item_id, OST_PAID, y->d.at_ms,
                              bkmap_salt(p->bk, y->d.item_id, y->m->user_id) };
        if (rs_put(&p->rs, &row) != 0) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
    }
    int calls = rs_add(&p->rs, &p->batch);
    if (calls < 0)
        snprintf(err, errlen, "out of memory, or an item's key too long");
    return calls;
}

/* One round trip of the batch's marks. 0, or -1 with err. */
static int mark_once(struct payments *p, char *err, size_t errlen)
{
    struct rs_said said;
    size_t marks = 0;
    for (size_t i = 0; i < p->nb; i++)
        marks += to_mark(p, i);
    if (marks == 0)
        return 0;
    if (!p->rp && rp_open(p->cfg, cfg_role_self(), &p->rp, err, errlen) != 0)
        return -1;
    int n = add_paid_marks(p, err, errlen);
    if (n <= 0)
        return n;
    /* Durable (rs_add): a paid mark fewer replicas hold than
     * redis.min_replicas_ack asks would be lost at a failover, the buyer
     * shown "waiting" for an order PostgreSQL has paid (issue #55). */
    rp_run(p->rp, &p->batch, err, errlen);
    rs_read(&p->rs, &p->batch, &said);
    if (said.done == said.calls)
        return 0;
    if (said.answered == said.calls)
        snprintf(err, errlen, "fewer than %d replicas hold the paid marks", p->batch.wait_replicas);
    else if (said.missing > 0)
        rs_missing_text(&p->rs, err, errlen);
    else if (said.why[0])
        snprintf(err, errlen, "%s", said.why);
    else if (!err[0])
        snprintf(err, errlen, "not answered");
    return -1;
}

/* The orders paid are marked paid in their items' orders hashes, in one
 * pipelined round trip (one per primary on a Redis Cluster). A connection
 * Redis closed (a restart, a failover) is opened again by the second try;
 * marks are safe to repeat. When both fail, the batch's paid payments are
 * tried again after the backoff (PT_DOWN), so that the buyers' status
 * calls never keep saying "waiting" for an order PostgreSQL has paid. */
static void mark_paid(struct payments *p)
{
    char err[256] = "";
    for (int try = 0; try < PAY_MARK_TRIES; try++) {
        err[0] = '\0';
        if (mark_once(p, err, sizeof(err)) == 0) {
            log_repeat_end(&p->say_mark, "a paid order marked");
            return;
        }
    }
    CM_ADD(redis_errors, 1);
    log_repeat(&p->say_mark, LOG_LVL_WARNING, "payments: redis mark",
               "payments: redis: %s; paid orders are tried again once Redis answers (PostgreSQL has them "
               "paid; logged once while it lasts)",
               err);
    for (size_t i = 0; i < p->nb; i++) {
        if (!to_mark(p, i))
            continue;
        if (p->b[i]->first_kind < 0)
            p->b[i]->first_kind = (int)p->txn.s[i].d.kind;
        p->txn.s[i].res = PT_DOWN;
    }
}

/* Lock the batch's users (one payment each) in one round trip. How many
 * were locked; the payments of the others are tried again soon (PT_BUSY),
 * or after the backoff when Redis failed and none could be had (PT_DOWN). */
static size_t lock_batch(struct payments *p)
{
    char err[256];
    struct ul_tally t;
    if (ul_connect(&p->ul, err, sizeof(err)) != 0) {
        log_repeat(&p->say_redis, LOG_LVL_WARNING, "payments: redis",
                   "payments: redis: %s; no user's lock, payments wait (logged once while it lasts)", err);
        goto down;
    }
    for (size_t i = 0; i < p->nb; i++)
        p->uids[i] = p->b[i]->m.user_id;
    ul_lock(&p->ul, p->uids, p->nb, &t);
    CM_ADD(lock_busy, (int64_t)t.busy);
    if (t.got > 0) {
        log_repeat_end(&p->say_redis, "a user's lock taken");
        return t.got;
    }
    if (t.errors == 0)
        return 0;
    CM_ADD(redis_errors, 1);
    log_repeat(&p->say_redis, LOG_LVL_WARNING, "payments: redis",
               "payments: redis: no user's lock (the lock's call failed); payments wait (logged once "
               "while it lasts)");
down:
    for (size_t i = 0; i < p->nb; i++)
        p->txn.s[i].res = PT_DOWN;
    return 0;
}

/* --- a batch of payments ---------------------------------------------------------- */

static void count(struct payments *p, const struct pay *y, const struct pt_did *d)
{
    switch (y->first_kind >= 0 ? (enum pt_kind)y->first_kind : d->kind) {
    case PT_APPLIED: CM_ADD(payments_applied, 1); break;
    case PT_REPLAYED: CM_ADD(payments_replayed, 1); break;
    case PT_LATE:
        CM_ADD(late_payments, 1);
        log_summary_add(&p->said_late,
                        "payment %s of order %" PRId64 " (user %" PRId64 ") came when the order was %s",
                        y->m.ref, y->m.order_id, y->m.user_id, d->then);
        break;
    }
}

/* One batch: lock its users, write it in one transaction, mark the paid
 * orders in Redis, release. The marks go before the release, so that the
 * user's Redis state changes under the lock PostgreSQL's changed under.
 * Each payment's slot (txn.s[i]: res, d) says how it went. */
static void run_batch(struct payments *p)
{
    for (size_t i = 0; i < p->nb; i++) {
        p->txn.s[i].m = &p->b[i]->m;
        p->txn.s[i].res = PT_BUSY;
        memset(&p->txn.s[i].d, 0, sizeof(p->txn.s[i].d));
    }
    if (lock_batch(p) == 0)
        return;
    pt_run(&p->txn, &p->ul, p->nb);
    mark_paid(p);
    ul_release(&p->ul);
}

/* A service failed: nothing is tried before the backoff is over. */
static void hold(struct payments *p, int64_t now)
{
    /* jittered, so consumers that lost one service together do not come
     * back to it together; never sooner than the base */
    p->hold_until = now + util_max_i64(PAY_BACKOFF_BASE_MS,
                                       util_backoff_ms(p->fails++, PAY_BACKOFF_BASE_MS, PAY_BACKOFF_CAP_MS));
}

/* Gather due ready payments into the batch, in arrival order: at most
 * PT_BATCH, and one per user, so a user's payments apply in the order they
 * came. A payment also waits behind any earlier one of its order (the first
 * payment of an order pays it; a second is late). The payments waiting for
 * their orders are not among them (pw_check): they hold back no one. */
static size_t pick(struct payments *p, int64_t now)
{
    p->nb = 0;
    i64map_clear(&p->users);
    i64map_clear(&p->orders);
    for (struct pay *y = p->w.ready.head; y && p->nb < PT_BATCH; y = y->next) {
        if (y->due_ms > now) {
            p->next_due = y->due_ms < p->next_due ? y->due_ms : p->next_due;
        } else if (!i64map_has(&p->users, &y->m.user_id) && !i64map_has(&p->orders, &y->m.order_id)) {
            y->slot = (int)p->nb;
            p->b[p->nb++] = y;
        }
        /* Out of memory: the rest waits for a later batch. */
        if (!i64map_put(&p->orders, &y->m.order_id) || !i64map_put(&p->users, &y->m.user_id))
            break;
    }
    return p->nb;
}

/* Act on how payment *pp of the batch went (its slot s); true when it left
 * the ready list (done: its offset may move; dead-lettered; waiting). */
static bool act_one(struct payments *p, struct pay **pp, const struct pt_slot *s, int64_t now)
{
    struct pay *y = *pp;
    char why[600];
    switch (s->res) {
    case PT_DONE:
        count(p, y, &s->d);
        pw_done(&p->w, pp);
        return true;
    case PT_REFUSE:
        snprintf(why, sizeof(why), "order %" PRId64 " is not user %" PRId64 "'s", y->m.order_id,
                 y->m.user_id);
        pw_refuse(&p->w, pp, why);
        return true;
    case PT_DATA:
        snprintf(why, sizeof(why), "refused by PostgreSQL: %s", s->refused ? s->refused : "?");
        pw_refuse(&p->w, pp, why);
        return true;
    case PT_UNKNOWN:
        /* Found by pw_check, and not by the transaction: it waits again. */
        pw_wait_again(&p->w, pp, now);
        return true;
    case PT_BUSY: y->due_ms = now + PAY_BUSY_MS; break;
    case PT_DOWN: return false; /* held back as a whole (hold) */
    }
    p->next_due = y->due_ms < p->next_due ? y->due_ms : p->next_due;
    return false;
}

/* Act on how the batch went, in arrival order: done, dead-lettered, waiting
 * again, busy (again soon), or down: a service failure holds everything
 * back for the backoff. */
static void act(struct payments *p)
{
    int64_t now = util_mono_ms();
    size_t left = p->nb;
    bool down = false;
    for (struct pay **pp = &p->w.ready.head; *pp && left > 0;) {
        struct pay *y = *pp;
        if (y->slot < 0) {
            pp = &y->next;
            continue;
        }
        const struct pt_slot *s = &p->txn.s[y->slot];
        y->slot = -1;
        left--;
        down |= s->res == PT_DOWN;
        if (!act_one(p, pp, s, now))
            pp = &y->next;
    }
    if (down)
        hold(p, now);
    else
        p->fails = 0;
}

/* After a turn (or at the stop: force): when the thread is due back, the
 * gauges, and what is said once per state change or per period. */
static void after_turn(struct payments *p, bool force)
{
    if (p->w.fresh.n > 0) /* fetched during a hold */
        p->next_due = p->hold_until < p->next_due ? p->hold_until : p->next_due;
    int64_t wait_due = pw_after_turn(&p->w, force);
    p->next_due = wait_due < p->next_due ? wait_due : p->next_due;
    log_summary_flush(&p->said_late, LOG_LVL_NOTICE, "payments: ",
                      "late payments recorded in late_payments (the orders and the stock left alone: "
                      "refund them)",
                      PAY_SAY_LATE_MS, force);
    ul_publish(&p->ul);
}

/* Look for the orders of the payments fetched and of the waiting ones due
 * (pw_check), then apply the ready payments a batch at a time, up to
 * PAY_TURN_BATCHES before the thread fetches and stores offsets again; what
 * is done leaves the lists. Stops at a service failure (hold). */
static void work(struct payments *p)
{
    int64_t now = util_mono_ms();
    p->next_due = INT64_MAX;
    if (now >= p->hold_until && pw_check(&p->w, now) != 0)
        hold(p, now);
    for (int n = 0; !bgt_stopping(&p->t); n++) {
        now = util_mono_ms();
        if (now < p->hold_until) {
            p->next_due = p->hold_until < p->next_due ? p->hold_until : p->next_due;
            break;
        }
        if (n == PAY_TURN_BATCHES) {
            p->next_due = now;
            break;
        }
        if (pick(p, now) == 0)
            break;
        run_batch(p);
        act(p);
    }
    after_turn(p, false);
}

/* --- the thread ------------------------------------------------------------------- */

/* kloop's hooks: a message fetched (room for more: PAY_HELD_MAX), and
 * partitions taken away. */
static bool take_payment(void *arg, const rd_kafka_message_t *km)
{
    struct payments *p = arg;
    pw_take(&p->w, km);
    return pw_held(&p->w) < PAY_HELD_MAX;
}

static void drop_revoked(void *arg, const rd_kafka_topic_partition_list_t *parts)
{
    pw_drop(&((struct payments *)arg)->w, parts);
}

/* Dead letters the broker took: their offsets may move; and the ones the
 * producer would not queue before, sent again. */
static void serve_letters(struct payments *p, int wait_ms)
{
    kl_serve(p->k, wait_ms);
    kl_drain(p->k);
}

static void *run(void *arg)
{
    struct payments *p = arg;
    char why[160];
    while (!bgt_stopping(&p->t)) {
        serve_letters(p, 0);
        work(p);
        snprintf(why, sizeof(why),
                 "%zu payments held (not looked up yet, or held back while a service is down)",
                 pw_held(&p->w));
        kl_pause(p->k, pw_held(&p->w) >= PAY_HELD_MAX, why);
        int64_t wait = p->next_due == INT64_MAX ? 100 : p->next_due - util_mono_ms();
        /* Fetch for up to wait, then whatever else is there now. */
        kl_fetch(p->k, NULL, (int)(wait < 0 ? 0 : wait > 100 ? 100 : wait), PAY_BURST);
        kl_store(p->k);
    }
    return NULL;
}

/* The consumer's librdkafka settings unless kafka.consumer_properties says otherwise. */
static const char *const pay_defaults[] = {
    "auto.offset.reset", "earliest", /* a new group must not skip payments */
    "enable.auto.commit", "true",    /* commits what was stored, nothing more */
    "auto.commit.interval.ms", "1000",
    NULL,
};

static void close_all(struct payments *p)
{
    kl_close(p->k); /* its last rebalance drops what is held (drop_revoked) */
    pw_free(&p->w);
    pt_free(&p->txn);
    ul_free(&p->ul);
    pgtrip_free(&p->trip);
    pgsess_close(&p->pg);
    rp_close(p->rp);
    rp_batch_free(&p->batch);
    rs_free(&p->rs);
    bkmap_free(p->bk);
    i64map_free(&p->users);
    i64map_free(&p->orders);
    free(p);
}

int payments_start(const struct cfg *c, struct payments **out, char *err, size_t errlen)
{
    struct payments *p = calloc(1, sizeof(*p));
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    p->cfg = c;
    if (!(p->bk = bkmap_new())) {
        free(p);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    rs_init(&p->rs, c);
    rp_batch_init(&p->batch);
    i64map_init(&p->users, 1, 0);
    i64map_init(&p->orders, 1, 0);
    memcpy(p->stmts, pt_stmts, sizeof(pt_stmts));
    memcpy(p->stmts + PT_NSTMTS, pw_stmts, sizeof(pw_stmts));
    /* A session idle in a transaction past the lock's lease is ended by
     * the server (a consumer frozen mid-payment holds the user's row). */
    snprintf(p->idle_ms, sizeof(p->idle_ms), "%d", c->lock.ttl_ms);
    struct pgsess_conf pc = { .appname = "seckill-consumer-payments", .settings_sql = embed_cons_session,
                              .nsettings = 1, .settings = { p->idle_ms }, .stmts = p->stmts,
                              .nstmts = ARRAY_SIZE(p->stmts), .say = &p->say_pg, .who = "payments",
                              .meanwhile = "payments wait" };
    pgsess_init(&p->pg, c, &pc);
    pgtrip_init(&p->trip, &p->pg);
    if (ul_init(&p->ul, c, PT_BATCH, c->consumer.workers) != 0 ||
        pt_init(&p->txn, &p->trip, &p->say_pg) != 0) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    snprintf(p->group, sizeof(p->group), "%s.payments", c->consumer.group_id);
    const struct kl_conf kc = {
        .topic = c->kafka.payments_topic, .group = p->group, .who = "payments: ", .defaults = pay_defaults,
        .assigned = &cm.payments_assigned, .letters = &cm.payments_dead_letter, .letters_close_ms = 1000,
        .hooks = { .arg = p, .take = take_payment, .revoked = drop_revoked },
    };
    if (kl_open(c, &kc, &p->k, err, errlen) != 0)
        goto fail;
    pw_init(&p->w, c, p->k, &p->trip, &p->say_pg);
    if (kl_subscribe(p->k, err, errlen) != 0)
        goto fail;
    log_notice("payments: consuming %s as group %s", c->kafka.payments_topic, p->group);
    if (bgt_start(&p->t, run, p) != 0) {
        snprintf(err, errlen, "payments: cannot start its thread");
        goto fail;
    }
    *out = p;
    return 0;
fail:
    close_all(p);
    return -1;
}

bool payments_fatal(const struct payments *p)
{
    return p && kl_fatal(p->k);
}

void payments_stop(struct payments *p)
{
    if (!p)
        return;
    bgt_stop(&p->t);
    /* The dead letters sent: their offsets may move once the broker has them. */
    for (int64_t end = util_mono_ms() + PAY_STOP_LETTERS_MS; kl_letters_out(p->k) && util_mono_ms() < end;)
        serve_letters(p, 50);
    kl_store(p->k);
    after_turn(p, true);
    close_all(p);
}
