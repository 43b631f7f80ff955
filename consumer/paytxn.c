#include "paytxn.h"

#include <inttypes.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmetrics.h"
#include "embed.h"
#include "util.h"

/* The fence is the workers' own statement (cons_fence.sql). Each is planned
 * for the arrays it is given (plan_each_run): a generic plan cannot tell a
 * batch of 1,024 from one of 3, and the planner took the wrong join for
 * some sizes before (pay_apply.sql says which). */
const struct pgsess_stmt pt_stmts[PT_NSTMTS] = {
    { "fence", embed_cons_fence, 2, true },
    { "apply", embed_pay_apply, 4, true },
    { "order", embed_pay_order, 2, true },
    { "late", embed_pay_late, 5, true },
};

int pt_init(struct paytxn *t, struct pgtrip *trip, struct log_repeat *say_pg)
{
    memset(t, 0, sizeof(*t));
    t->trip = trip;
    t->say_pg = say_pg;
    i64map_init(&t->by_user, 1, sizeof(size_t));
    i64map_init(&t->by_order, 1, sizeof(size_t));
    return i64map_reset(&t->by_user, PT_BATCH) == 0 && i64map_reset(&t->by_order, PT_BATCH) == 0 ? 0 : -1;
}

void pt_free(struct paytxn *t)
{
    for (size_t i = 0; i < PT_BATCH; i++)
        free(t->s[i].refused);
    i64map_free(&t->by_user);
    i64map_free(&t->by_order);
    for (int k = 0; k < 5; k++)
        pgarr_free(&t->arr[k]);
}

/* Run the round trip queued on the trip. PGT_OK, its results in the trip
 * until pgtrip_reset. Otherwise the failure's class, its words in t->err,
 * the transaction rolled back; a transient one said once while it lasts, a
 * data error quietly (the batch's payments are tried one at a time, and
 * the one refused alone is dead-lettered with those words). */
static enum pgt_status run_trip(struct paytxn *t)
{
    enum pgt_status st = pgtrip_run(t->trip, t->err, sizeof(t->err));
    if (st == PGT_OK)
        return PGT_OK;
    pgtrip_rollback(t->trip);
    if (st == PGT_TRANSIENT)
        log_repeat(t->say_pg, LOG_LVL_WARNING, "payments: postgres",
                   "payments: postgres: %s; retried (logged once while it lasts)", t->err);
    else
        log_debug("payments: postgres refused a batch: %s; its payments are tried one at a time", t->err);
    return st;
}

/* The batch's payment whose order (or, by_user, user) is the id in text,
 * or -1. A batch holds one payment per order and per user; a result row is
 * found by a hash lookup, not a walk of the batch (a walk per row was an
 * eighth of the thread's time at 1,024 a batch). */
static int slot_of(const struct paytxn *t, const char *text, bool by_user)
{
    int64_t id;
    if (util_parse_i64(text, 1, INT64_MAX, &id) != 0)
        return -1;
    const size_t *i = i64map_get(by_user ? &t->by_user : &t->by_order, &id);
    return i ? (int)*i : -1;
}

/* Index the batch for slot_of. Never fails: both tables have room for
 * PT_BATCH entries (pt_init). */
static void index_batch(struct paytxn *t)
{
    i64map_clear(&t->by_user);
    i64map_clear(&t->by_order);
    for (size_t i = 0; i < t->n; i++) {
        *(size_t *)i64map_put(&t->by_user, &t->s[i].m->user_id) = i;
        *(size_t *)i64map_put(&t->by_order, &t->s[i].m->order_id) = i;
    }
}

/* From payment i on, every payment whose user is locked gets res: a
 * transaction failed or was rolled back, so none of them is done. */
static void set_locked(struct paytxn *t, size_t i, enum pt_result res)
{
    for (; i < t->n; i++)
        if (ul_held(t->ul, i))
            t->s[i].res = res;
}

/* BEGIN and the fences of the payments to decide (go), in one round trip: a
 * payment whose user's fence is stale leaves the transaction (PT_BUSY:
 * again under a fresh lock); the others go on. */
static enum pgt_status fences(struct paytxn *t)
{
    const struct pgarr *const a[] = { &t->arr[0], &t->arr[1] };
    enum pgt_status st;
    int64_t asked = 0, passed = 0;
    pgarr_begin(&t->arr[0], PGARR_INT8);
    pgarr_begin(&t->arr[1], PGARR_INT8);
    for (size_t i = 0; i < t->n; i++) {
        if (!t->go[i])
            continue;
        pgarr_add_i64(&t->arr[0], t->s[i].m->user_id);
        pgarr_add_i64(&t->arr[1], ul_fence(t->ul, i));
        t->go[i] = false; /* until its fence is seen to pass */
        asked++;
    }
    pgarr_end(&t->arr[0]);
    pgarr_end(&t->arr[1]);
    pgtrip_sql(t->trip, "BEGIN", PGRES_COMMAND_OK);
    int at = pgtrip_arrays(t->trip, "fence", a, 2, PGRES_TUPLES_OK);
    if ((st = run_trip(t)) != PGT_OK)
        return st;
    PGresult *r = pgtrip_result(t->trip, at);
    for (int k = 0; k < PQntuples(r); k++) {
        int i = slot_of(t, PQgetvalue(r, k, 0), true);
        if (i >= 0 && !t->go[i]) {
            t->go[i] = true;
            passed++;
        }
    }
    pgtrip_reset(t->trip);
    CM_ADD(stale_fence, asked - passed);
    return PGT_OK;
}

/* The arrays of the payments still to decide (go), or of payment only
 * (>= 0): order, user, paid_at, reference, and what the order was. How
 * many payments. */
static size_t fill(struct paytxn *t, int only)
{
    size_t n = 0;
    for (int k = 0; k < 5; k++)
        pgarr_begin(&t->arr[k], k < 3 ? PGARR_INT8 : PGARR_TEXT);
    for (size_t i = 0; i < t->n; i++) {
        const struct pt_slot *y = &t->s[i];
        const char *then = y->d.then ? y->d.then : "";
        if (only >= 0 ? (int)i != only : !t->go[i])
            continue;
        pgarr_add_i64(&t->arr[0], y->m->order_id);
        pgarr_add_i64(&t->arr[1], y->m->user_id);
        pgarr_add_i64(&t->arr[2], y->m->paid_at_ms);
        pgarr_add_text(&t->arr[3], y->m->ref, strlen(y->m->ref));
        pgarr_add_text(&t->arr[4], then, strlen(then));
        n++;
    }
    for (int k = 0; k < 5; k++)
        pgarr_end(&t->arr[k]);
    return n;
}

/* Queue statement name with the first n arrays fill made. */
static int add_filled(struct paytxn *t, const char *name, int n, ExecStatusType want)
{
    const struct pgarr *const a[] = { &t->arr[0], &t->arr[1], &t->arr[2], &t->arr[3], &t->arr[4] };
    return pgtrip_arrays(t->trip, name, a, n, want);
}

/* Pay the orders of the payments to decide (pay_apply.sql): those paid now
 * are done. */
static enum pgt_status apply(struct paytxn *t)
{
    enum pgt_status st;
    if (fill(t, -1) == 0)
        return PGT_OK;
    int at = add_filled(t, "apply", 4, PGRES_TUPLES_OK);
    if ((st = run_trip(t)) != PGT_OK)
        return st;
    PGresult *r = pgtrip_result(t->trip, at);
    for (int k = 0; k < PQntuples(r); k++) {
        int i = slot_of(t, PQgetvalue(r, k, 0), false);
        if (i < 0)
            continue;
        struct pt_slot *y = &t->s[i];
        y->res = PT_DONE;
        y->d.kind = PT_APPLIED;
        y->d.at_ms = y->m->paid_at_ms;
        y->d.mark = util_parse_i64(PQgetvalue(r, k, 1), 1, INT64_MAX, &y->d.item_id) == 0;
        t->go[i] = false;
    }
    pgtrip_reset(t->trip);
    return PGT_OK;
}

/* The order, found paid by this payment before: a replay (told again to
 * Redis, which keeps it paid as it is: the commit may have been the last thing a
 * consumer did before it died). */
static void found_paid(const struct pay_msg *m, PGresult *r, int i, struct pt_did *out)
{
    char want[PAY_REF_MAX + 8];
    snprintf(want, sizeof(want), "paid %s", m->ref);
    if (strcmp(PQgetvalue(r, i, 4), want) != 0) {
        out->kind = PT_LATE;
        out->then = "paid_other";
        return;
    }
    out->kind = PT_REPLAYED;
    out->mark = util_parse_i64(PQgetvalue(r, i, 3), 1, INT64_MAX, &out->item_id) == 0 &&
                util_parse_i64(PQgetvalue(r, i, 5), 0, INT64_MAX, &out->at_ms) == 0;
}

/* Why the payment paid nothing, from pay_order.sql's rows of its order: into
 * *out (PT_DONE), or PT_UNKNOWN (nowhere yet), PT_REFUSE (the order is
 * another user's), PT_BUSY (pending: it came after pay_apply.sql looked;
 * tried again). */
static enum pt_result classify(const struct pay_msg *m, PGresult *r, struct pt_did *out)
{
    static const char *const late[] = { "expired", "cancelled", "final" };
    bool refused = false, other_user = false;
    char so[24];
    snprintf(so, sizeof(so), "%" PRId64, m->order_id);
    for (int i = 0; i < PQntuples(r); i++) {
        const char *status = PQgetvalue(r, i, 1);
        int64_t u = 0;
        if (strcmp(PQgetvalue(r, i, 6), so) != 0)
            continue;
        if (strcmp(PQgetvalue(r, i, 0), "refused") == 0) {
            refused = true;
            continue;
        }
        if (util_parse_i64(PQgetvalue(r, i, 2), 1, INT64_MAX, &u) != 0 || u != m->user_id) {
            other_user = true;
            continue;
        }
        if (strcmp(status, "paid") == 0) {
            found_paid(m, r, i, out);
            return PT_DONE;
        }
        for (size_t k = 0; k < ARRAY_SIZE(late); k++)
            if (strcmp(status, late[k]) == 0) {
                out->kind = PT_LATE;
                out->then = late[k];
                return PT_DONE;
            }
        return PT_BUSY;
    }
    if (refused) {
        out->kind = PT_LATE;
        out->then = "refused";
        return PT_DONE;
    }
    return other_user ? PT_REFUSE : PT_UNKNOWN;
}

/* Why the payments still to decide paid nothing (pay_order.sql, one
 * statement): each one classified. */
static enum pgt_status look_up(struct paytxn *t)
{
    enum pgt_status st;
    if (fill(t, -1) == 0)
        return PGT_OK;
    int at = add_filled(t, "order", 2, PGRES_TUPLES_OK);
    if ((st = run_trip(t)) != PGT_OK)
        return st;
    PGresult *r = pgtrip_result(t->trip, at);
    for (size_t i = 0; i < t->n; i++) {
        if (!t->go[i])
            continue;
        t->s[i].res = classify(t->s[i].m, r, &t->s[i].d);
        /* Late: recorded next (record_late); anything else is decided. */
        t->go[i] = t->s[i].res == PT_DONE && t->s[i].d.kind == PT_LATE;
    }
    pgtrip_reset(t->trip);
    return PGT_OK;
}

/* Record the batch's late payments in one statement (pay_late.sql), after
 * a savepoint, in one round trip; one recorded before is a replay. The
 * consumer may not read late_payments back: the command tag says how many
 * rows are new, so all or none tells each one's kind; a mix (a replay of a
 * batch cut short, or some second payments replayed) sets *mixed: commit
 * rolls back to the savepoint and records them one at a time to tell
 * which. */
static enum pgt_status record_late(struct paytxn *t, bool *mixed)
{
    long n = 0, rows;
    enum pgt_status st;
    *mixed = false;
    for (size_t i = 0; i < t->n; i++)
        n += t->go[i];
    if (n == 0)
        return PGT_OK;
    pgtrip_sql(t->trip, "SAVEPOINT late", PGRES_COMMAND_OK);
    fill(t, -1);
    int at = add_filled(t, "late", 5, PGRES_COMMAND_OK);
    if ((st = run_trip(t)) != PGT_OK)
        return st;
    rows = strtol(PQcmdTuples(pgtrip_result(t->trip, at)), NULL, 10);
    pgtrip_reset(t->trip);
    *mixed = rows != 0 && rows != n;
    for (size_t i = 0; i < t->n && !*mixed; i++) {
        if (t->go[i] && rows == 0)
            t->s[i].d.kind = PT_REPLAYED;
        t->go[i] = false;
    }
    return PGT_OK;
}

/* COMMIT, in one round trip with, when the late payments were mixed
 * (record_late), the rollback to the savepoint and each of them recorded
 * again alone: its command tag tells a replay from a new one. */
static enum pgt_status commit(struct paytxn *t, bool mixed)
{
    struct pgtrip *tr = t->trip;
    enum pgt_status st;
    if (mixed) {
        pgtrip_sql(tr, "ROLLBACK TO SAVEPOINT late", PGRES_COMMAND_OK);
        for (size_t i = 0; i < t->n; i++)
            if (t->go[i] && fill(t, (int)i) > 0)
                add_filled(t, "late", 5, PGRES_COMMAND_OK);
    }
    int at = pgtrip_sql(tr, "COMMIT", PGRES_COMMAND_OK);
    if ((st = run_trip(t)) != PGT_OK)
        return st;
    /* COMMIT of a transaction the server had aborted answers ROLLBACK. */
    if (strcmp(PQcmdStatus(pgtrip_result(tr, at)), "COMMIT") != 0) {
        pgtrip_reset(tr);
        log_repeat(t->say_pg, LOG_LVL_WARNING, "payments: postgres",
                   "payments: postgres: COMMIT: the server rolled back; retried (logged once while it "
                   "lasts)");
        return PGT_TRANSIENT;
    }
    for (size_t i = 0, k = 1; i < t->n && mixed; i++) {
        if (!t->go[i])
            continue;
        if (strtol(PQcmdTuples(pgtrip_result(tr, (int)k++)), NULL, 10) == 0)
            t->s[i].d.kind = PT_REPLAYED;
        t->go[i] = false;
    }
    pgtrip_reset(tr);
    log_repeat_end(t->say_pg, "a payment committed");
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
static enum txn txn(struct paytxn *t)
{
    char err[512];
    enum pgt_status st;
    bool mixed = false;
    if (pgsess_ready(t->trip->s, err, sizeof(err)) != 0)
        return TXN_DOWN;
    if ((st = fences(t)) != PGT_OK || (st = apply(t)) != PGT_OK || (st = look_up(t)) != PGT_OK ||
        (st = record_late(t, &mixed)) != PGT_OK)
        return st == PGT_DATA ? TXN_DATA : TXN_DOWN;
    /* The last look at the leases, before the trip that commits; losing one
     * during it is what the fences (whose rows this transaction holds) are
     * for. */
    if (ul_any_lost(t->ul)) {
        pgtrip_rollback(t->trip);
        return TXN_LEASE_LOST;
    }
    st = commit(t, mixed);
    return st == PGT_OK ? TXN_COMMITTED : st == PGT_DATA ? TXN_DATA : TXN_DOWN;
}

/* Payment i of the batch, refused by the server on its own: for the
 * dead-letter topic, with the server's words (PT_DATA). */
static void refused_alone(struct paytxn *t, size_t i)
{
    struct pt_slot *y = &t->s[i];
    free(y->refused);
    y->refused = strdup(t->err);
    y->res = PT_DATA;
}

/* The server refused the batch's transaction for what it carries: each of
 * its payments again in a transaction of its own (still under its lock), so
 * that one payment the server refuses holds up no other; the one refused
 * alone goes to the dead-letter topic with the server's words. A failure
 * that is not the data's leaves the rest to be tried again. */
static void one_by_one(struct paytxn *t)
{
    for (size_t i = 0; i < t->n; i++) {
        if (!ul_held(t->ul, i))
            continue;
        for (size_t j = 0; j < t->n; j++)
            t->go[j] = j == i;
        t->s[i].res = PT_BUSY;
        memset(&t->s[i].d, 0, sizeof(t->s[i].d));
        switch (txn(t)) {
        case TXN_COMMITTED: break;
        case TXN_DATA: refused_alone(t, i); break;
        case TXN_DOWN: set_locked(t, i, PT_DOWN); return;
        case TXN_LEASE_LOST:
            CM_ADD(lease_lost, 1);
            set_locked(t, i, PT_BUSY);
            return;
        }
    }
}

/* The batch's transaction. A failure leaves nothing done: every payment of
 * the transaction is tried again, after the backoff (PT_DOWN), or soon
 * under fresh locks when a lease was lost (PT_BUSY: the whole batch again
 * is simpler than telling apart what the other users wrote); a refusal of
 * the data, one payment at a time (one_by_one), unless it was alone. */
static void batch_txn(struct paytxn *t)
{
    size_t locked = 0, last = 0;
    for (size_t i = 0; i < t->n; i++)
        if (ul_held(t->ul, i))
            locked++, last = i;
    switch (txn(t)) {
    case TXN_COMMITTED: return;
    case TXN_DOWN: set_locked(t, 0, PT_DOWN); return;
    case TXN_LEASE_LOST:
        CM_ADD(lease_lost, 1);
        set_locked(t, 0, PT_BUSY);
        return;
    case TXN_DATA:
        if (locked > 1)
            one_by_one(t);
        else
            refused_alone(t, last);
        return;
    }
}

void pt_run(struct paytxn *t, const struct ul_batch *ul, size_t n)
{
    t->ul = ul;
    t->n = n;
    for (size_t i = 0; i < n; i++) {
        free(t->s[i].refused);
        t->s[i].refused = NULL;
        t->go[i] = ul_held(ul, i);
        if (!t->go[i])
            continue;
        t->s[i].res = PT_BUSY;
        memset(&t->s[i].d, 0, sizeof(t->s[i].d));
    }
    index_batch(t);
    batch_txn(t);
    t->ul = NULL;
}
