#include "payments.h"

#include <inttypes.h>
#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bgthread.h"
#include "cmetrics.h"
#include "embed.h"
#include "i64map.h"
#include "kloop.h"
#include "log.h"
#include "order.h"
#include "paysig.h"
#include "pgtrip.h"
#include "queue.h"
#include "rpipe.h"
#include "rstate.h"
#include "ulocks.h"
#include "util.h"

/* Payments held at once to be applied (fetched and not looked up yet, or
 * held back while a service is down); beyond it fetching pauses until some
 * are done. The payments waiting for their orders are not counted: they have
 * a bound of their own (consumer.payment_wait_max, PAY_WAIT_BYTES_MAX). */
#define PAY_HELD_MAX 10000
/* The most bytes the waiting set holds (its payments, their messages and
 * keys): with a message of a few hundred bytes, consumer.payment_wait_max
 * (50,000 by default) binds first; a set of huge messages stops here. */
#define PAY_WAIT_BYTES_MAX (64u << 20)
/* Late payments and dead letters are said in one line per period at most,
 * with how many came since: one line each would flood the log in a burst. */
#define PAY_SAY_LATE_MS 10000
#define PAY_SAY_LETTERS_MS 1000
/* Messages taken per turn before the held payments are tried again: two
 * full batches. */
#define PAY_BURST 2048
/* A service down: nothing is tried for this long, doubling to the cap. */
#define PAY_BACKOFF_BASE_MS 100
#define PAY_BACKOFF_CAP_MS 5000
/* An order not persisted yet: looked for again after this long, doubling to
 * the cap (the orders topic is seldom more than a batch behind). */
#define PAY_WAIT_BASE_MS 50
#define PAY_WAIT_CAP_MS 1000
/* The user's lock held elsewhere, or a stale fence: tried again this soon. */
#define PAY_BUSY_MS 20
/* Tries of a batch's marks: the second on a fresh connection (mark_paid). */
#define PAY_MARK_TRIES 2
/* At a stop, how long dead letters sent may take to be acknowledged. */
#define PAY_STOP_LETTERS_MS 5000
/* Payments applied in one transaction at most. The cost of a payment alone
 * is its round trips and its commit's WAL flush; shared by a thousand,
 * they are a small part of it, while the users' locks are still held for
 * tens of milliseconds only. bench/expiry --payments (2 consumers): 256 a
 * batch applied 11,463-12,077 payments a second, 1,024 14,195-14,642. */
#define PAY_BATCH 1024
/* Batches per turn of the thread before it fetches and stores offsets again. */
#define PAY_TURN_BATCHES 8
/* How one try at a payment went. */
enum pay_result {
    PAY_DONE,    /* paid, a replay, or recorded late: its offset may move */
    PAY_UNKNOWN, /* the order is nowhere yet: wait for it */
    PAY_BUSY,    /* the user's lock is held elsewhere, or the fence was stale: again soon */
    PAY_DOWN,    /* PostgreSQL or Redis failed: back off */
    PAY_REFUSE,  /* never payable: dead-letter it */
    PAY_DATA,    /* refused by PostgreSQL on its own (pay.refused says why): dead-letter it */
};

/* What a committed payment did, for the metrics and Redis. */
enum pay_kind { PK_APPLIED, PK_REPLAYED, PK_LATE };

struct paid {
    enum pay_kind kind;
    bool mark;             /* the order is paid: tell Redis */
    int64_t item_id, at_ms; /* its item, when it was paid */
    const char *then;      /* PK_LATE: late_payments.status_then */
};

/* One payment message on its way: from the poll to done (its offset may
 * move) or to the dead-letter producer. */
struct pay {
    struct pay *next;
    int32_t partition;
    int64_t offset;
    uint32_t epoch;
    struct pay_msg m;
    int64_t first_ms, due_ms; /* monotonic: seen first, next look or try */
    int tries;                /* times its order was looked for and not found */
    void *payload, *key;      /* raw, for a dead letter */
    size_t payload_len, key_len;
    bool picked;         /* in the batch under way */
    enum pay_result res; /* how its try in the batch went */
    struct paid d;       /* PAY_DONE: what it did */
    /* Committed, but Redis was not told: tried again as a whole (its
     * transaction then finds it paid by itself and changes nothing), and
     * counted as what its first commit did. */
    bool unmarked;
    enum pay_kind first_kind;
    char *refused; /* PAY_DATA: the server's words */
};

/* Payments in the order they joined the list, and what they weigh. */
struct plist {
    struct pay *head, **tailp;
    size_t n, bytes;
};

/* Events said as one line per period at most: how many since the last
 * line, and the last one's words. */
struct summary {
    int64_t n, last_ms;
    char last[320];
};

struct payments {
    const struct cfg *cfg;
    struct bgthread t;
    struct kloop *k; /* the consumer, its offsets, its dead letters (kloop.h) */
    char group[512];  /* <consumer.group_id>.payments */
    /* A payment fetched is fresh until its order is looked for (check, no
     * lock); found, it is ready (batches, under the user's lock); not
     * found, it waits (looked for again) until its order comes or
     * consumer.payment_wait_ms is over. Each list keeps arrival order. */
    struct plist fresh, ready, wait;
    int64_t hold_until, next_due, wait_due; /* monotonic; wait_due: the first waiting payment's */
    int fails;                              /* service failures in a row: the backoff's exponent */
    int64_t max_block;                      /* the highest order id block seen taken */
    size_t over_max;                        /* fresh payments of a block above it */
    struct i64map found;                    /* check: the orders found */
    struct summary said_late, said_letters;
    struct pgsess pg;
    struct pgtrip trip;
    char idle_ms[24];  /* the session's idle_in_transaction_session_timeout */
    char pg_err[512];  /* the last PostgreSQL failure's words */
    struct rp *rp;
    struct rp_batch batch;
    struct rs rs; /* the paid orders' states (rstate.h) */
    /* The batch under way: one payment per user, its user (whose lock is
     * ul's i), and whether it is still to be decided in the transaction
     * (go). */
    struct pay *b[PAY_BATCH];
    size_t nb;
    int64_t uids[PAY_BATCH];
    struct ul_batch ul;
    bool go[PAY_BATCH];
    struct i64map users, orders; /* picking: whose payments wait */
    struct i64map by_user, by_order; /* the batch: a payment's place in b by its user, its order */
    struct pgarr arr[5];         /* a statement's parameters */
    struct log_repeat say_pg, say_redis, say_mark, say_wait, say_blocks;
};

/* --- the payments held ---------------------------------------------------------- */

static void pay_free(struct pay *y)
{
    if (!y)
        return;
    free(y->payload);
    free(y->key);
    free(y->refused);
    free(y);
}

/* What a payment held costs in memory (the waiting set's bound). */
static size_t pay_bytes(const struct pay *y)
{
    return sizeof(*y) + y->payload_len + y->key_len;
}

static void pl_init(struct plist *l)
{
    l->head = NULL;
    l->tailp = &l->head;
    l->n = l->bytes = 0;
}

static void pl_append(struct plist *l, struct pay *y)
{
    y->next = NULL;
    *l->tailp = y;
    l->tailp = &y->next;
    l->n++;
    l->bytes += pay_bytes(y);
}

/* Take *pp (a payment of l) out of it; returns it. */
static struct pay *pl_unlink(struct plist *l, struct pay **pp)
{
    struct pay *y = *pp;
    *pp = y->next;
    if (l->tailp == &y->next)
        l->tailp = pp;
    y->next = NULL;
    l->n--;
    l->bytes -= pay_bytes(y);
    return y;
}

/* Payments held to be applied: the pause's count (PAY_HELD_MAX). */
static size_t held(const struct payments *p)
{
    return p->fresh.n + p->ready.n;
}

/* One more event of s; the line says it later (say_flush). */
static void say_add(struct summary *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say_add(struct summary *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->last, sizeof(s->last), fmt, ap);
    va_end(ap);
    s->n++;
}

/* The line of s's events since the last one, once every_ms passed since
 * it (or now, when force). */
static void say_flush(struct summary *s, enum log_level level, const char *what, int64_t every_ms, bool force)
{
    int64_t now = util_mono_ms();
    if (s->n == 0 || (!force && now - s->last_ms < every_ms))
        return;
    log_msg(level, "payments: %" PRId64 " %s since the last report; the last: %s", s->n, what, s->last);
    s->n = 0;
    s->last_ms = now;
}

/* A payment done: its offset may move once those before it are done too. */
static void finish(struct payments *p, struct pay *y)
{
    kl_done(p->k, y->partition, y->epoch, y->offset);
    pay_free(y);
}

/* Hand y to the dead-letter producer with its reason (y is gone then). */
static void dead_letter(struct payments *p, struct pay *y, const char *why)
{
    struct cmsg *m = calloc(1, sizeof(*m));
    if (!m || !(m->error = strdup(why))) {
        /* held and never done: the offset waits, nothing is lost */
        log_error("payments: out of memory dead-lettering %s[%" PRId32 "]@%" PRId64,
                  p->cfg->kafka.payments_topic, y->partition, y->offset);
        free(m);
        pay_free(y);
        return;
    }
    say_add(&p->said_letters, "%s[%" PRId32 "]@%" PRId64 ": %s", p->cfg->kafka.payments_topic, y->partition,
            y->offset, why);
    m->partition = y->partition;
    m->offset = y->offset;
    m->epoch = y->epoch;
    m->payload = y->payload;
    m->payload_len = y->payload_len;
    m->key = y->key;
    m->key_len = y->key_len;
    y->payload = y->key = NULL;
    pay_free(y);
    kl_letter(p->k, m);
}

/* Dead letters the broker took: their offsets may move; and the ones the
 * producer would not queue before, sent again. */
static void serve_letters(struct payments *p, int wait_ms)
{
    kl_serve(p->k, wait_ms);
    kl_drain(p->k);
}

/* --- PostgreSQL ------------------------------------------------------------------ */

/* The statements of the payments' session. The fence is the workers' own
 * statement (cons_fence.sql): a user's orders and payments advance one
 * fence. Each is planned for the arrays it is given (plan_each_run): a
 * generic plan cannot tell a batch of 1,024 from one of 3, and the planner
 * took the wrong join for some sizes before (pay_apply.sql says which). */
static const struct pgsess_stmt pay_stmts[] = {
    { "fence", embed_cons_fence, 2, true },
    { "apply", embed_pay_apply, 4, true },
    { "order", embed_pay_order, 2, true },
    { "late", embed_pay_late, 5, true },
    { "waiting", embed_pay_waiting, 2, true },
    { "blocks", embed_pay_blocks, 0, true },
};

/* Run the round trip queued on p->trip. PGT_OK, its results in the trip
 * until pgtrip_reset. Otherwise the failure's class, its words in
 * p->pg_err, the transaction rolled back; said once while it lasts, but for
 * a batch's data error (quiet: its payments are tried one at a time, and
 * the one refused alone is dead-lettered with those words). */
static enum pgt_status pg_trip(struct payments *p, bool batch)
{
    enum pgt_status st = pgtrip_run(&p->trip, p->pg_err, sizeof(p->pg_err));
    if (st == PGT_OK)
        return PGT_OK;
    pgtrip_rollback(&p->trip);
    if (st == PGT_TRANSIENT)
        log_repeat(&p->say_pg, LOG_LVL_WARNING, "payments: postgres",
                   "payments: postgres: %s; retried (logged once while it lasts)", p->pg_err);
    else if (!batch)
        log_repeat(&p->say_pg, LOG_LVL_ERROR, "payments: postgres refused",
                   "payments: postgres refused a statement as data: %s; retried after the backoff (logged "
                   "once while it lasts)",
                   p->pg_err);
    else
        log_debug("payments: postgres refused a batch: %s; its payments are tried one at a time", p->pg_err);
    return st;
}

/* --- PostgreSQL: a batch's transaction ------------------------------------------ */

/* The batch's payment whose order (or, by_user, user) is the id in text,
 * or -1. A batch holds one payment per order and per user; a result row is
 * found by a hash lookup, not a walk of the batch (a walk per row was an
 * eighth of the thread's time at 1,024 a batch). */
static int slot_of(const struct payments *p, const char *text, bool by_user)
{
    int64_t id;
    if (util_parse_i64(text, 1, INT64_MAX, &id) != 0)
        return -1;
    const size_t *i = i64map_get(by_user ? &p->by_user : &p->by_order, &id);
    return i ? (int)*i : -1;
}

/* Index the batch for slot_of. Never fails: both tables have room for
 * PAY_BATCH entries (payments_start). */
static void index_batch(struct payments *p)
{
    i64map_clear(&p->by_user);
    i64map_clear(&p->by_order);
    for (size_t i = 0; i < p->nb; i++) {
        *(size_t *)i64map_put(&p->by_user, &p->b[i]->m.user_id) = i;
        *(size_t *)i64map_put(&p->by_order, &p->b[i]->m.order_id) = i;
    }
}

/* From payment i on, every payment whose user is locked gets res: a
 * transaction failed or was rolled back, so none of them is done. */
static void set_locked(struct payments *p, size_t i, enum pay_result res)
{
    for (; i < p->nb; i++)
        if (ul_held(&p->ul, i))
            p->b[i]->res = res;
}

/* BEGIN and the fences of the payments to decide (go), in one round trip: a
 * payment whose user's fence is stale leaves the transaction (PAY_BUSY:
 * again under a fresh lock); the others go on. */
static enum pgt_status fences(struct payments *p)
{
    const struct pgarr *const a[] = { &p->arr[0], &p->arr[1] };
    enum pgt_status st;
    int64_t asked = 0, passed = 0;
    pgarr_begin(&p->arr[0], PGARR_INT8);
    pgarr_begin(&p->arr[1], PGARR_INT8);
    for (size_t i = 0; i < p->nb; i++) {
        if (!p->go[i])
            continue;
        pgarr_add_i64(&p->arr[0], p->b[i]->m.user_id);
        pgarr_add_i64(&p->arr[1], ul_fence(&p->ul, i));
        p->go[i] = false; /* until its fence is seen to pass */
        asked++;
    }
    pgarr_end(&p->arr[0]);
    pgarr_end(&p->arr[1]);
    pgtrip_sql(&p->trip, "BEGIN", PGRES_COMMAND_OK);
    int at = pgtrip_arrays(&p->trip, "fence", a, 2, PGRES_TUPLES_OK);
    if ((st = pg_trip(p, true)) != PGT_OK)
        return st;
    PGresult *r = pgtrip_result(&p->trip, at);
    for (int k = 0; k < PQntuples(r); k++) {
        int i = slot_of(p, PQgetvalue(r, k, 0), true);
        if (i >= 0 && !p->go[i]) {
            p->go[i] = true;
            passed++;
        }
    }
    pgtrip_reset(&p->trip);
    CM_ADD(stale_fence, asked - passed);
    return PGT_OK;
}

/* The arrays of the payments still to decide (go), or of payment only
 * (>= 0): order, user, paid_at, reference, and what the order was. How
 * many payments. */
static size_t fill(struct payments *p, int only)
{
    size_t n = 0;
    for (int k = 0; k < 5; k++)
        pgarr_begin(&p->arr[k], k < 3 ? PGARR_INT8 : PGARR_TEXT);
    for (size_t i = 0; i < p->nb; i++) {
        const struct pay *y = p->b[i];
        const char *then = y->d.then ? y->d.then : "";
        if (only >= 0 ? (int)i != only : !p->go[i])
            continue;
        pgarr_add_i64(&p->arr[0], y->m.order_id);
        pgarr_add_i64(&p->arr[1], y->m.user_id);
        pgarr_add_i64(&p->arr[2], y->m.paid_at_ms);
        pgarr_add_text(&p->arr[3], y->m.ref, strlen(y->m.ref));
        pgarr_add_text(&p->arr[4], then, strlen(then));
        n++;
    }
    for (int k = 0; k < 5; k++)
        pgarr_end(&p->arr[k]);
    return n;
}

/* Queue statement name with the first n arrays fill made. */
static int add_filled(struct payments *p, const char *name, int n, ExecStatusType want)
{
    const struct pgarr *const a[] = { &p->arr[0], &p->arr[1], &p->arr[2], &p->arr[3], &p->arr[4] };
    return pgtrip_arrays(&p->trip, name, a, n, want);
}

/* Pay the orders of the payments to decide (pay_apply.sql): those paid now
 * are done. */
static enum pgt_status apply(struct payments *p)
{
    enum pgt_status st;
    if (fill(p, -1) == 0)
        return PGT_OK;
    int at = add_filled(p, "apply", 4, PGRES_TUPLES_OK);
    if ((st = pg_trip(p, true)) != PGT_OK)
        return st;
    PGresult *r = pgtrip_result(&p->trip, at);
    for (int k = 0; k < PQntuples(r); k++) {
        int i = slot_of(p, PQgetvalue(r, k, 0), false);
        if (i < 0)
            continue;
        struct pay *y = p->b[i];
        y->res = PAY_DONE;
        y->d.kind = PK_APPLIED;
        y->d.at_ms = y->m.paid_at_ms;
        y->d.mark = util_parse_i64(PQgetvalue(r, k, 1), 1, INT64_MAX, &y->d.item_id) == 0;
        p->go[i] = false;
    }
    pgtrip_reset(&p->trip);
    return PGT_OK;
}

/* The order, found paid by this payment before: a replay (told again to
 * Redis, which keeps it paid as it is: the commit may have been the last thing a
 * consumer did before it died). */
static void found_paid(const struct pay *y, PGresult *r, int i, struct paid *out)
{
    char want[PAY_REF_MAX + 8];
    snprintf(want, sizeof(want), "paid %s", y->m.ref);
    if (strcmp(PQgetvalue(r, i, 4), want) != 0) {
        out->kind = PK_LATE;
        out->then = "paid_other";
        return;
    }
    out->kind = PK_REPLAYED;
    out->mark = util_parse_i64(PQgetvalue(r, i, 3), 1, INT64_MAX, &out->item_id) == 0 &&
                util_parse_i64(PQgetvalue(r, i, 5), 0, INT64_MAX, &out->at_ms) == 0;
}

/* Why the payment paid nothing, from pay_order.sql's rows of its order: into
 * *out (PAY_DONE), or PAY_UNKNOWN (nowhere yet), PAY_REFUSE (the order is
 * another user's), PAY_BUSY (pending: it came after pay_apply.sql looked;
 * tried again). */
static enum pay_result classify(const struct pay *y, PGresult *r, struct paid *out)
{
    static const char *const late[] = { "expired", "cancelled", "final" };
    bool refused = false, other_user = false;
    char so[24];
    snprintf(so, sizeof(so), "%" PRId64, y->m.order_id);
    for (int i = 0; i < PQntuples(r); i++) {
        const char *status = PQgetvalue(r, i, 1);
        int64_t u = 0;
        if (strcmp(PQgetvalue(r, i, 6), so) != 0)
            continue;
        if (strcmp(PQgetvalue(r, i, 0), "refused") == 0) {
            refused = true;
            continue;
        }
        if (util_parse_i64(PQgetvalue(r, i, 2), 1, INT64_MAX, &u) != 0 || u != y->m.user_id) {
            other_user = true;
            continue;
        }
        if (strcmp(status, "paid") == 0) {
            found_paid(y, r, i, out);
            return PAY_DONE;
        }
        for (size_t k = 0; k < ARRAY_SIZE(late); k++)
            if (strcmp(status, late[k]) == 0) {
                out->kind = PK_LATE;
                out->then = late[k];
                return PAY_DONE;
            }
        return PAY_BUSY;
    }
    if (refused) {
        out->kind = PK_LATE;
        out->then = "refused";
        return PAY_DONE;
    }
    return other_user ? PAY_REFUSE : PAY_UNKNOWN;
}

/* Why the payments still to decide paid nothing (pay_order.sql, one
 * statement): each one classified. */
static enum pgt_status look_up(struct payments *p)
{
    enum pgt_status st;
    if (fill(p, -1) == 0)
        return PGT_OK;
    int at = add_filled(p, "order", 2, PGRES_TUPLES_OK);
    if ((st = pg_trip(p, true)) != PGT_OK)
        return st;
    PGresult *r = pgtrip_result(&p->trip, at);
    for (size_t i = 0; i < p->nb; i++) {
        if (!p->go[i])
            continue;
        p->b[i]->res = classify(p->b[i], r, &p->b[i]->d);
        /* Late: recorded next (record_late); anything else is decided. */
        p->go[i] = p->b[i]->res == PAY_DONE && p->b[i]->d.kind == PK_LATE;
    }
    pgtrip_reset(&p->trip);
    return PGT_OK;
}

/* Record the batch's late payments in one statement (pay_late.sql), after
 * a savepoint, in one round trip; one recorded before is a replay. The
 * consumer may not read late_payments back: the command tag says how many
 * rows are new, so all or none tells each one's kind; a mix (a replay of a
 * batch cut short, or some second payments replayed) sets *mixed: commit
 * rolls back to the savepoint and records them one at a time to tell
 * which. */
static enum pgt_status record_late(struct payments *p, bool *mixed)
{
    long n = 0, rows;
    enum pgt_status st;
    *mixed = false;
    for (size_t i = 0; i < p->nb; i++)
        n += p->go[i];
    if (n == 0)
        return PGT_OK;
    pgtrip_sql(&p->trip, "SAVEPOINT late", PGRES_COMMAND_OK);
    fill(p, -1);
    int at = add_filled(p, "late", 5, PGRES_COMMAND_OK);
    if ((st = pg_trip(p, true)) != PGT_OK)
        return st;
    rows = strtol(PQcmdTuples(pgtrip_result(&p->trip, at)), NULL, 10);
    pgtrip_reset(&p->trip);
    *mixed = rows != 0 && rows != n;
    for (size_t i = 0; i < p->nb && !*mixed; i++) {
        if (p->go[i] && rows == 0)
            p->b[i]->d.kind = PK_REPLAYED;
        p->go[i] = false;
    }
    return PGT_OK;
}

/* COMMIT, in one round trip with, when the late payments were mixed
 * (record_late), the rollback to the savepoint and each of them recorded
 * again alone: its command tag tells a replay from a new one. */
static enum pgt_status commit(struct payments *p, bool mixed)
{
    struct pgtrip *t = &p->trip;
    enum pgt_status st;
    if (mixed) {
        pgtrip_sql(t, "ROLLBACK TO SAVEPOINT late", PGRES_COMMAND_OK);
        for (size_t i = 0; i < p->nb; i++)
            if (p->go[i] && fill(p, (int)i) > 0)
                add_filled(p, "late", 5, PGRES_COMMAND_OK);
    }
    int at = pgtrip_sql(t, "COMMIT", PGRES_COMMAND_OK);
    if ((st = pg_trip(p, true)) != PGT_OK)
        return st;
    /* COMMIT of a transaction the server had aborted answers ROLLBACK. */
    if (strcmp(PQcmdStatus(pgtrip_result(t, at)), "COMMIT") != 0) {
        pgtrip_reset(t);
        log_repeat(&p->say_pg, LOG_LVL_WARNING, "payments: postgres",
                   "payments: postgres: COMMIT: the server rolled back; retried (logged once while it "
                   "lasts)");
        return PGT_TRANSIENT;
    }
    for (size_t i = 0, k = 1; i < p->nb && mixed; i++) {
        if (!p->go[i])
            continue;
        if (strtol(PQcmdTuples(pgtrip_result(t, (int)k++)), NULL, 10) == 0)
            p->b[i]->d.kind = PK_REPLAYED;
        p->go[i] = false;
    }
    pgtrip_reset(t);
    log_repeat_end(&p->say_pg, "a payment committed");
    return PGT_OK;
}

/* How a transaction of payments ended. */
enum txn { TXN_COMMITTED, TXN_DOWN, TXN_DATA, TXN_LEASE_LOST };

/* The transaction of the payments to decide (go), under their users'
 * locks: fences, payments, why the rest paid nothing, late payments, one
 * commit; as few round trips as the decisions between them allow (two when
 * every payment pays its order, the fences with BEGIN). Each payment's res
 * says how it went when committed; otherwise the transaction is rolled
 * back, nothing of it done. */
static enum txn txn(struct payments *p)
{
    char err[512];
    enum pgt_status st;
    bool mixed = false;
    if (pgsess_ready(&p->pg, err, sizeof(err)) != 0)
        return TXN_DOWN;
    if ((st = fences(p)) != PGT_OK || (st = apply(p)) != PGT_OK || (st = look_up(p)) != PGT_OK ||
        (st = record_late(p, &mixed)) != PGT_OK)
        return st == PGT_DATA ? TXN_DATA : TXN_DOWN;
    /* The last look at the leases, before the trip that commits; losing one
     * during it is what the fences (whose rows this transaction holds) are
     * for. */
    if (ul_any_lost(&p->ul)) {
        pgtrip_rollback(&p->trip);
        return TXN_LEASE_LOST;
    }
    st = commit(p, mixed);
    return st == PGT_OK ? TXN_COMMITTED : st == PGT_DATA ? TXN_DATA : TXN_DOWN;
}

/* Payment i of the batch, refused by the server on its own: for the
 * dead-letter topic, with the server's words (PAY_DATA). */
static void refused_alone(struct payments *p, size_t i)
{
    struct pay *y = p->b[i];
    free(y->refused);
    y->refused = strdup(p->pg_err);
    y->res = PAY_DATA;
}

/* The server refused the batch's transaction for what it carries: each of
 * its payments again in a transaction of its own (still under its lock), so
 * that one payment the server refuses holds up no other; the one refused
 * alone goes to the dead-letter topic with the server's words. A failure
 * that is not the data's leaves the rest to be tried again. */
static void one_by_one(struct payments *p)
{
    for (size_t i = 0; i < p->nb; i++) {
        if (!ul_held(&p->ul, i))
            continue;
        for (size_t j = 0; j < p->nb; j++)
            p->go[j] = j == i;
        p->b[i]->res = PAY_BUSY;
        memset(&p->b[i]->d, 0, sizeof(p->b[i]->d));
        switch (txn(p)) {
        case TXN_COMMITTED: break;
        case TXN_DATA: refused_alone(p, i); break;
        case TXN_DOWN: set_locked(p, i, PAY_DOWN); return;
        case TXN_LEASE_LOST:
            CM_ADD(lease_lost, 1);
            set_locked(p, i, PAY_BUSY);
            return;
        }
    }
}

/* The batch's transaction. A failure leaves nothing done: every payment of
 * the transaction is tried again, after the backoff (PAY_DOWN), or soon
 * under fresh locks when a lease was lost (PAY_BUSY: the whole batch again
 * is simpler than telling apart what the other users wrote); a refusal of
 * the data, one payment at a time (one_by_one), unless it was alone. */
static void batch_txn(struct payments *p)
{
    size_t locked = 0, last = 0;
    for (size_t i = 0; i < p->nb; i++)
        if (ul_held(&p->ul, i))
            locked++, last = i;
    switch (txn(p)) {
    case TXN_COMMITTED: return;
    case TXN_DOWN: set_locked(p, 0, PAY_DOWN); return;
    case TXN_LEASE_LOST:
        CM_ADD(lease_lost, 1);
        set_locked(p, 0, PAY_BUSY);
        return;
    case TXN_DATA:
        if (locked > 1)
            one_by_one(p);
        else
            refused_alone(p, last);
        return;
    }
}

/* --- Redis ------------------------------------------------------------------------ */

/* Whether the batch's payment i is to be marked paid in Redis. */
static bool to_mark(const struct payments *p, size_t i)
{
    return p->b[i]->res == PAY_DONE && p->b[i]->d.mark;
}

/* The orders of the batch paid (now, or before by the same payment) into
 * p->batch: one seckill_mark call per item (rstate.h), for a sale's
 * payments are mostly for one item, and one call marking them all costs
 * Redis far less than one call each. How many calls, or -1 with err. */
static int add_paid_marks(struct payments *p, char *err, size_t errlen)
{
    rp_batch_reset(&p->batch);
    rs_begin(&p->rs);
    for (size_t i = 0; i < p->nb; i++) {
        const struct pay *y = p->b[i];
        struct rs_row row = { y->m.order_id, y->d.item_id, OST_PAID, y->d.at_ms };
        if (to_mark(p, i) && rs_put(&p->rs, &row) != 0) {
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
    int n = add_paid_marks(p, err, errlen);
    if (n <= 0)
        return n;
    if (!p->rp && rp_open(p->cfg, cfg_role_self(), &p->rp, err, errlen) != 0)
        return -1;
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
 * tried again after the backoff (PAY_DOWN), so that the buyers' status
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
        struct pay *y = p->b[i];
        if (!to_mark(p, i))
            continue;
        if (!y->unmarked) {
            y->unmarked = true;
            y->first_kind = y->d.kind;
        }
        y->res = PAY_DOWN;
    }
}

/* Lock the batch's users (one payment each) in one round trip. How many
 * were locked; the payments of the others are tried again soon (PAY_BUSY),
 * or after the backoff when Redis failed and none could be had (PAY_DOWN). */
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
    for (size_t i = 0; i < p->nb; i++)
        p->go[i] = ul_held(&p->ul, i);
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
        p->b[i]->res = PAY_DOWN;
    return 0;
}

/* --- the orders looked for, without a lock ------------------------------------------ */

#define PAY_UNKNOWN_WHY "order unknown: not in PostgreSQL within consumer.payment_wait_ms"

/* After a look that found the order nowhere: when to look again (doubling
 * from PAY_WAIT_BASE_MS to PAY_WAIT_CAP_MS, and once more when the wait is
 * over), or false: consumer.payment_wait_ms is over. */
static bool wait_more(struct payments *p, struct pay *y, int64_t now)
{
    int shift = y->tries < 5 ? y->tries : 5;
    int64_t wait_ms = CFG_GET(p->cfg->consumer.payment_wait_ms);
    if (now - y->first_ms >= wait_ms)
        return false;
    y->tries++;
    int64_t ms = PAY_WAIT_BASE_MS << shift, last = y->first_ms + wait_ms;
    y->due_ms = now + (ms < PAY_WAIT_CAP_MS ? ms : PAY_WAIT_CAP_MS);
    if (y->due_ms > last) /* one last look when the wait is over */
        y->due_ms = last;
    return true;
}

/* y waits for its order, at the end of the waiting set. The set holds at
 * most consumer.payment_wait_max payments and PAY_WAIT_BYTES_MAX of them;
 * past either, the payment that has waited longest goes to the dead-letter
 * topic ("waiting set full", counted and alerted) to make room: nothing is
 * dropped unsaid, and a flood of payments for orders that never come cannot
 * hold more memory than that. */
static void wait_add(struct payments *p, struct pay *y)
{
    size_t max = (size_t)CFG_GET(p->cfg->consumer.payment_wait_max);
    while (p->wait.head && (p->wait.n >= max || p->wait.bytes + pay_bytes(y) > PAY_WAIT_BYTES_MAX)) {
        CM_ADD(payments_wait_full, 1);
        dead_letter(p, pl_unlink(&p->wait, &p->wait.head),
                    "waiting set full: consumer.payment_wait_max payments (or 64 MiB) wait for their orders");
    }
    log_repeat(&p->say_wait, LOG_LVL_NOTICE, "payments: waiting for orders",
               "payments: order %" PRId64 " of payment %s is not in PostgreSQL yet: it waits for it, as any "
               "other payment will whose order is not there (logged once while payments wait; "
               "seckill_consumer_payments_waiting)",
               y->m.order_id, y->m.ref);
    pl_append(&p->wait, y);
    p->wait_due = y->due_ms < p->wait_due ? y->due_ms : p->wait_due;
}

/* The highest order id block taken, into max_block (it never goes down). 0;
 * 1 when the consumer may not read it (migration 015 not applied: said
 * once while it lasts, and ids go unchecked rather than payments stopping);
 * -1 when PostgreSQL failed (said once while it lasts). */
static int read_max_block(struct payments *p)
{
    int64_t b;
    int at = pgtrip_params(&p->trip, "blocks", NULL, 0, PGRES_TUPLES_OK);
    enum pgt_status st = pgtrip_run(&p->trip, p->pg_err, sizeof(p->pg_err));
    PGresult *r = pgtrip_result(&p->trip, at);
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    int ret = 0;
    if (st == PGT_OK) {
        log_repeat_end(&p->say_blocks, "order_id_blocks read");
        if (PQntuples(r) == 1 && util_parse_i64(PQgetvalue(r, 0, 0), 0, INT64_MAX, &b) == 0 &&
            b > p->max_block)
            p->max_block = b;
    } else if (state && strcmp(state, "42501") == 0) {
        log_repeat(&p->say_blocks, LOG_LVL_WARNING, "payments: order_id_blocks",
                   "payments: postgres: the consumer may not read order_id_blocks (apply "
                   "sql/migrations/015_payment_order_ids.sql): payments for order ids never issued are not "
                   "refused at once, they wait consumer.payment_wait_ms (logged once while it lasts)");
        ret = 1;
    } else {
        log_repeat(&p->say_pg, LOG_LVL_WARNING, "payments: postgres",
                   "payments: postgres: reading the highest order id block: %s; retried (logged once while "
                   "it lasts)",
                   p->pg_err);
        ret = -1;
    }
    pgtrip_rollback(&p->trip);
    return ret;
}

/* Refuse the fresh payments whose order id no producer could have issued:
 * its block (order.h: block << ORDER_ID_SEQ_BITS | seq) above the highest
 * order_id_blocks holds, read again when a payment names a block above the
 * one known. A producer takes a block in a committed transaction before it
 * hands out an id of it, so a payment for a real order never names a block
 * PostgreSQL does not have. (Block 0 is refused as it is taken: take.)
 * Such an order never comes: waiting consumer.payment_wait_ms for it would
 * only hold the partition's offset back and fill the waiting set. 0, or -1
 * (PostgreSQL failed: the payments stay fresh). */
static int vet(struct payments *p)
{
    char why[160];
    int r;
    if (p->over_max == 0)
        return 0;
    if ((r = read_max_block(p)) != 0) {
        p->over_max = r > 0 ? 0 : p->over_max; /* not permitted: the payments go on unchecked */
        return r > 0 ? 0 : -1;
    }
    for (struct pay **pp = &p->fresh.head; *pp;) {
        struct pay *y = *pp;
        int64_t block = y->m.order_id >> ORDER_ID_SEQ_BITS;
        if (block <= p->max_block) {
            pp = &y->next;
            continue;
        }
        snprintf(why, sizeof(why),
                 "order id never issued: its block %" PRId64 " is above the highest taken (%" PRId64 ")",
                 block, p->max_block);
        CM_ADD(payments_never_issued, 1);
        dead_letter(p, pl_unlink(&p->fresh, pp), why);
    }
    p->over_max = 0;
    return 0;
}

/* Queue pay_waiting.sql for the ids gathered in arr[0] (orders) and
 * arr[1] (users), and start the next chunk (libpq copied the arrays). */
static void look_chunk(struct payments *p)
{
    const struct pgarr *const a[] = { &p->arr[0], &p->arr[1] };
    pgarr_end(&p->arr[0]);
    pgarr_end(&p->arr[1]);
    pgtrip_arrays(&p->trip, "waiting", a, 2, PGRES_TUPLES_OK);
    pgarr_begin(&p->arr[0], PGARR_INT8);
    pgarr_begin(&p->arr[1], PGARR_INT8);
}

/* y's order and user into the chunk; a full one is queued. */
static void look_add(struct payments *p, const struct pay *y, size_t *n)
{
    pgarr_add_i64(&p->arr[0], y->m.order_id);
    pgarr_add_i64(&p->arr[1], y->m.user_id);
    if (++*n % PAY_BATCH == 0)
        look_chunk(p);
}

/* The orders each chunk found, into found. 0, or -1 out of memory. */
static int take_found(struct payments *p)
{
    for (int c = 0; c < p->trip.n; c++) {
        PGresult *r = pgtrip_result(&p->trip, c);
        for (int k = 0; k < PQntuples(r); k++) {
            int64_t id;
            if (util_parse_i64(PQgetvalue(r, k, 0), 1, INT64_MAX, &id) == 0 && !i64map_put(&p->found, &id)) {
                log_error("payments: out of memory looking for the payments' orders; tried again");
                return -1;
            }
        }
    }
    return 0;
}

/* Look for the orders of every fresh payment and of the waiting ones that
 * are due: one statement per PAY_BATCH of them, all in one round trip, the
 * orders found into found. 0, or -1. */
static int look_for(struct payments *p, int64_t now)
{
    size_t n = 0;
    int ret;
    i64map_clear(&p->found);
    pgarr_begin(&p->arr[0], PGARR_INT8);
    pgarr_begin(&p->arr[1], PGARR_INT8);
    for (struct pay *y = p->wait.head; y; y = y->next)
        if (y->due_ms <= now)
            look_add(p, y, &n);
    for (struct pay *y = p->fresh.head; y; y = y->next)
        look_add(p, y, &n);
    if (n % PAY_BATCH != 0)
        look_chunk(p);
    if (n == 0)
        return 0;
    if (pg_trip(p, false) != PGT_OK)
        return -1;
    ret = take_found(p);
    pgtrip_reset(&p->trip);
    return ret;
}

/* The waiting payments whose order is found now become ready, behind the
 * ready ones, in the order they came, every payment of such an order (due
 * or not: a later payment of an order never overtakes the first); a due
 * one whose order is still nowhere is looked for again later, or, past
 * consumer.payment_wait_ms, goes to the dead-letter topic. Then the fresh
 * ones: ready, or waiting. */
static void sort_out(struct payments *p, int64_t now)
{
    p->wait_due = INT64_MAX;
    for (struct pay **pp = &p->wait.head; *pp;) {
        struct pay *y = *pp;
        if (i64map_has(&p->found, &y->m.order_id)) {
            y->due_ms = now;
            pl_append(&p->ready, pl_unlink(&p->wait, pp));
            continue;
        }
        if (y->due_ms <= now && !wait_more(p, y, now)) {
            dead_letter(p, pl_unlink(&p->wait, pp), PAY_UNKNOWN_WHY);
            continue;
        }
        p->wait_due = y->due_ms < p->wait_due ? y->due_ms : p->wait_due;
        pp = &y->next;
    }
    while (p->fresh.head) {
        struct pay *y = pl_unlink(&p->fresh, &p->fresh.head);
        if (i64map_has(&p->found, &y->m.order_id))
            pl_append(&p->ready, y);
        else if (wait_more(p, y, now))
            wait_add(p, y);
        else /* fresh past the whole wait: PostgreSQL was down that long */
            dead_letter(p, y, PAY_UNKNOWN_WHY);
    }
}

/* Before any lock: the fresh payments of ids never issued are refused, and
 * the orders of the fresh ones and of the waiting ones due are looked for,
 * in one statement per PAY_BATCH. Only payments whose orders are found go on
 * to the batches, under the users' locks: a payment for an order that is not
 * there takes no lock and writes no fence, and however many wait, the
 * others' batches are not theirs to share. 0, or -1 (PostgreSQL failed:
 * nothing moved; hold). */
static int check(struct payments *p, int64_t now)
{
    if (p->fresh.n == 0 && (p->wait.n == 0 || now < p->wait_due))
        return 0;
    char err[512];
    if (pgsess_ready(&p->pg, err, sizeof(err)) != 0 || vet(p) != 0 || look_for(p, now) != 0)
        return -1;
    sort_out(p, now);
    return 0;
}

/* --- a batch of payments ---------------------------------------------------------- */

static void count(struct payments *p, const struct pay *y, const struct paid *d)
{
    switch (y->unmarked ? y->first_kind : d->kind) {
    case PK_APPLIED: CM_ADD(payments_applied, 1); break;
    case PK_REPLAYED: CM_ADD(payments_replayed, 1); break;
    case PK_LATE:
        CM_ADD(late_payments, 1);
        say_add(&p->said_late,
                "payment %s of order %" PRId64 " (user %" PRId64 ") came when the order was %s", y->m.ref,
                y->m.order_id, y->m.user_id, d->then);
        break;
    }
}

/* One batch: lock its users, write it in one transaction, mark the paid
 * orders in Redis, release. The marks go before the release, so that the
 * user's Redis state changes under the lock PostgreSQL's changed under.
 * Each payment's res (and d) says how it went. */
static void run_batch(struct payments *p)
{
    for (size_t i = 0; i < p->nb; i++) {
        p->b[i]->res = PAY_BUSY;
        memset(&p->b[i]->d, 0, sizeof(p->b[i]->d));
    }
    index_batch(p);
    if (lock_batch(p) == 0)
        return;
    batch_txn(p);
    mark_paid(p);
    ul_release(&p->ul);
}

/* A service failed: nothing is tried before the backoff is over. */
static void hold(struct payments *p, int64_t now)
{
    int shift = p->fails < 6 ? p->fails : 6;
    p->fails++;
    int64_t ms = PAY_BACKOFF_BASE_MS << shift;
    p->hold_until = now + (ms < PAY_BACKOFF_CAP_MS ? ms : PAY_BACKOFF_CAP_MS);
}

/* Gather due ready payments into the batch, in arrival order: at most
 * PAY_BATCH, and one per user, so a user's payments apply in the order they
 * came. A payment also waits behind any earlier one of its order (the first
 * payment of an order pays it; a second is late). The payments waiting for
 * their orders are not among them (check): they hold back no one. */
static size_t pick(struct payments *p, int64_t now)
{
    p->nb = 0;
    i64map_clear(&p->users);
    i64map_clear(&p->orders);
    for (struct pay *y = p->ready.head; y && p->nb < PAY_BATCH; y = y->next) {
        if (y->due_ms > now) {
            p->next_due = y->due_ms < p->next_due ? y->due_ms : p->next_due;
        } else if (!i64map_has(&p->users, &y->m.user_id) && !i64map_has(&p->orders, &y->m.order_id)) {
            y->picked = true;
            p->b[p->nb++] = y;
        }
        /* Out of memory: the rest waits for a later batch. */
        if (!i64map_put(&p->orders, &y->m.order_id) || !i64map_put(&p->users, &y->m.user_id))
            break;
    }
    return p->nb;
}

/* Act on how a payment of the batch went; true when it left the list
 * (done: its offset may move; or dead-lettered). */
static bool settle_one(struct payments *p, struct pay **pp, int64_t now)
{
    struct pay *y = *pp;
    char why[600];
    switch (y->res) {
    case PAY_DONE:
        count(p, y, &y->d);
        finish(p, pl_unlink(&p->ready, pp));
        return true;
    case PAY_REFUSE:
        snprintf(why, sizeof(why), "order %" PRId64 " is not user %" PRId64 "'s", y->m.order_id,
                 y->m.user_id);
        dead_letter(p, pl_unlink(&p->ready, pp), why);
        return true;
    case PAY_DATA:
        snprintf(why, sizeof(why), "refused by PostgreSQL: %s", y->refused ? y->refused : "?");
        dead_letter(p, pl_unlink(&p->ready, pp), why);
        return true;
    case PAY_UNKNOWN:
        /* Found by check, and not by the transaction: it waits again. */
        y = pl_unlink(&p->ready, pp);
        if (wait_more(p, y, now))
            wait_add(p, y);
        else
            dead_letter(p, y, PAY_UNKNOWN_WHY);
        return true;
    case PAY_BUSY: y->due_ms = now + PAY_BUSY_MS; break;
    case PAY_DOWN: return false; /* held back as a whole (hold) */
    }
    p->next_due = y->due_ms < p->next_due ? y->due_ms : p->next_due;
    return false;
}

/* Act on how the batch went, in arrival order; a service failure holds
 * everything back for the backoff. */
static void settle(struct payments *p)
{
    int64_t now = util_mono_ms();
    size_t left = p->nb;
    bool down = false;
    for (struct pay **pp = &p->ready.head; *pp && left > 0;) {
        struct pay *y = *pp;
        if (!y->picked) {
            pp = &y->next;
            continue;
        }
        y->picked = false;
        left--;
        down |= y->res == PAY_DOWN;
        if (!settle_one(p, pp, now))
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
    if (p->fresh.n > 0) /* fetched during a hold */
        p->next_due = p->hold_until < p->next_due ? p->hold_until : p->next_due;
    if (p->wait.n == 0) {
        p->wait_due = INT64_MAX;
        log_repeat_end(&p->say_wait, "no payment waits for its order");
    }
    p->next_due = p->wait_due < p->next_due ? p->wait_due : p->next_due;
    say_flush(&p->said_late, LOG_LVL_NOTICE,
              "late payments recorded in late_payments (the orders and the stock left alone: refund them)",
              PAY_SAY_LATE_MS, force);
    say_flush(&p->said_letters, LOG_LVL_WARNING, "payments dead-lettered", PAY_SAY_LETTERS_MS, force);
    CM_SET(payments_waiting, (int64_t)p->wait.n);
    ul_publish(&p->ul);
}

/* Look for the orders of the payments fetched and of the waiting ones due
 * (check), then apply the ready payments a batch at a time, up to
 * PAY_TURN_BATCHES before the thread fetches and stores offsets again; what
 * is done leaves the lists. Stops at a service failure (hold). */
static void work(struct payments *p)
{
    int64_t now = util_mono_ms();
    p->next_due = INT64_MAX;
    if (now >= p->hold_until && check(p, now) != 0)
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
        settle(p);
    }
    after_turn(p, false);
}

/* --- Kafka -------------------------------------------------------------------------- */

/* Partitions taken away: what is held for them is the next owner's to read
 * again (their offsets never moved past it). */
static void drop_from(struct plist *l, const rd_kafka_topic_partition_list_t *parts)
{
    for (struct pay **pp = &l->head; *pp;) {
        bool gone = false;
        for (int i = 0; i < parts->cnt && !gone; i++)
            gone = parts->elems[i].partition == (*pp)->partition;
        if (gone)
            pay_free(pl_unlink(l, pp));
        else
            pp = &(*pp)->next;
    }
}

static void revoked(void *arg, const rd_kafka_topic_partition_list_t *parts)
{
    struct payments *p = arg;
    drop_from(&p->fresh, parts);
    drop_from(&p->ready, parts);
    drop_from(&p->wait, parts);
    CM_SET(payments_waiting, (int64_t)p->wait.n);
}

static void *dup_bytes(const void *b, size_t n)
{
    void *d = malloc(n ? n : 1);
    if (d && n)
        memcpy(d, b, n);
    return d;
}

/* Decode a fetched payment, check its key and its MAC: 0, or -1 with the
 * reason (a MAC that fails is counted). */
static int judge(const rd_kafka_message_t *km, struct pay_msg *m, char *why, size_t len)
{
    if (paymsg_decode(km->payload, km->len, m, why, len) != 0 ||
        paymsg_check_key(m, km->key, km->key_len, why, len) != 0)
        return -1;
    /* Only a payment the payment service signed may pay an order or write a
     * late payment: a stolen payments topic password must do neither. */
    if (psig_verify(m, why, len) != KEYRING_OK) {
        CM_ADD(payments_unsigned, 1);
        return -1;
    }
    return 0;
}

/* A message fetched: held as a payment, or dead-lettered. Whether there is
 * room for more (PAY_HELD_MAX). */
static bool take(void *arg, const rd_kafka_message_t *km)
{
    struct payments *p = arg;
    char why[256];
    struct pay *y;
    if (!(y = calloc(1, sizeof(*y))))
        goto oom;
    y->partition = km->partition;
    y->offset = km->offset;
    if (kl_track(p->k, km->partition, km->offset, &y->epoch) != 0) {
        free(y); /* a partition no longer ours */
        return true;
    }
    y->payload = dup_bytes(km->payload, km->len);
    y->payload_len = km->len;
    y->key = km->key ? dup_bytes(km->key, km->key_len) : NULL;
    y->key_len = km->key ? km->key_len : 0;
    if (!y->payload || (km->key && !y->key)) {
        pay_free(y); /* tracked and never done: the offset waits */
        goto oom;
    }
    if (judge(km, &y->m, why, sizeof(why)) != 0) {
        dead_letter(p, y, why);
        return true;
    }
    int64_t block = y->m.order_id >> ORDER_ID_SEQ_BITS;
    if (block == 0) { /* identities start at 1: no producer has block 0 */
        CM_ADD(payments_never_issued, 1);
        dead_letter(p, y, "order id never issued: its block is 0");
        return true;
    }
    p->over_max += block > p->max_block; /* vet reads the blocks again */
    y->first_ms = y->due_ms = util_mono_ms();
    pl_append(&p->fresh, y);
    return held(p) < PAY_HELD_MAX;
oom:
    log_error("payments: out of memory at %s[%" PRId32 "]@%" PRId64, p->cfg->kafka.payments_topic,
              km->partition, km->offset);
    return true;
}

/* --- the thread ------------------------------------------------------------------- */

static void *run(void *arg)
{
    struct payments *p = arg;
    char why[160];
    while (!bgt_stopping(&p->t)) {
        serve_letters(p, 0);
        work(p);
        snprintf(why, sizeof(why),
                 "%zu payments held (not looked up yet, or held back while a service is down)", held(p));
        kl_pause(p->k, held(p) >= PAY_HELD_MAX, why);
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
    kl_close(p->k); /* its last rebalance drops what is held (revoked) */
    struct plist *lists[] = { &p->fresh, &p->ready, &p->wait };
    for (size_t i = 0; i < ARRAY_SIZE(lists); i++)
        while (lists[i]->head)
            pay_free(pl_unlink(lists[i], &lists[i]->head));
    ul_free(&p->ul);
    pgtrip_free(&p->trip);
    pgsess_close(&p->pg);
    for (int k = 0; k < 5; k++)
        pgarr_free(&p->arr[k]);
    rp_close(p->rp);
    rp_batch_free(&p->batch);
    rs_free(&p->rs);
    i64map_free(&p->users);
    i64map_free(&p->orders);
    i64map_free(&p->by_user);
    i64map_free(&p->by_order);
    i64map_free(&p->found);
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
    pl_init(&p->fresh);
    pl_init(&p->ready);
    pl_init(&p->wait);
    p->wait_due = INT64_MAX;
    p->said_late.last_ms = p->said_letters.last_ms = INT64_MIN / 2;
    rs_init(&p->rs, c);
    rp_batch_init(&p->batch);
    i64map_init(&p->users, 1, 0);
    i64map_init(&p->orders, 1, 0);
    i64map_init(&p->by_user, 1, sizeof(size_t));
    i64map_init(&p->by_order, 1, sizeof(size_t));
    i64map_init(&p->found, 1, 0);
    /* A session idle in a transaction past the lock's lease is ended by
     * the server (a consumer frozen mid-payment holds the user's row). */
    snprintf(p->idle_ms, sizeof(p->idle_ms), "%d", c->lock.ttl_ms);
    struct pgsess_conf pc = { .appname = "seckill-consumer-payments", .settings_sql = embed_cons_session,
                              .nsettings = 1, .settings = { p->idle_ms }, .stmts = pay_stmts,
                              .nstmts = ARRAY_SIZE(pay_stmts), .say = &p->say_pg, .who = "payments",
                              .meanwhile = "payments wait" };
    pgsess_init(&p->pg, c, &pc);
    pgtrip_init(&p->trip, &p->pg);
    if (ul_init(&p->ul, c, PAY_BATCH, c->consumer.workers) != 0 ||
        i64map_reset(&p->by_user, PAY_BATCH) != 0 ||
        i64map_reset(&p->by_order, PAY_BATCH) != 0) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    snprintf(p->group, sizeof(p->group), "%s.payments", c->consumer.group_id);
    const struct kl_conf kc = {
        .topic = c->kafka.payments_topic, .group = p->group, .who = "payments: ", .defaults = pay_defaults,
        .assigned = &cm.payments_assigned, .letters = &cm.payments_dead_letter, .letters_close_ms = 1000,
        .hooks = { .arg = p, .take = take, .revoked = revoked },
    };
    if (kl_open(c, &kc, &p->k, err, errlen) != 0 || kl_subscribe(p->k, err, errlen) != 0)
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
