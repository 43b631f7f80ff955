#include "paywait.h"

#include <inttypes.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmetrics.h"
#include "embed.h"
#include "order.h"
#include "paysig.h"
#include "util.h"

/* An order not persisted yet: looked for again after this long, doubling to
 * the cap (the orders topic is seldom more than a batch behind). */
#define PW_WAIT_BASE_MS 50
#define PW_WAIT_CAP_MS 1000
/* Dead letters are said in one line per period at most, with how many came
 * since: one line each would flood the log in a burst. */
#define PW_SAY_LETTERS_MS 1000

/* Planned for the arrays they are given (plan_each_run), as the payments'
 * statements are (payments.c says why). */
const struct pgsess_stmt pw_stmts[PW_NSTMTS] = {
    { "waiting", embed_pay_waiting, 2, true },
    { "blocks", embed_pay_blocks, 0, true },
};

void pw_init(struct pw *w, const struct cfg *c, struct kloop *k, struct pgtrip *trip,
             struct log_repeat *say_pg)
{
    *w = (struct pw){ .cfg = c, .k = k, .trip = trip, .say_pg = say_pg, .wait_due = INT64_MAX,
                      .wait_bytes_max = PW_WAIT_BYTES_MAX };
    w->fresh.tailp = &w->fresh.head;
    w->ready.tailp = &w->ready.head;
    w->wait.tailp = &w->wait.head;
    i64map_init(&w->found, 1, 0);
}

/* --- the lists --------------------------------------------------------------------- */

static void pay_free(struct pay *y)
{
    if (!y)
        return;
    free(y->payload);
    free(y->key);
    free(y);
}

/* What a payment held costs in memory (the waiting set's bound). */
static size_t pay_bytes(const struct pay *y)
{
    return sizeof(*y) + y->payload_len + y->key_len;
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

void pw_free(struct pw *w)
{
    struct plist *lists[] = { &w->fresh, &w->ready, &w->wait };
    for (size_t i = 0; i < ARRAY_SIZE(lists); i++)
        while (lists[i]->head)
            pay_free(pl_unlink(lists[i], &lists[i]->head));
    i64map_free(&w->found);
    pgarr_free(&w->ids[0]);
    pgarr_free(&w->ids[1]);
}

size_t pw_held(const struct pw *w)
{
    return w->fresh.n + w->ready.n;
}

/* --- dead letters -------------------------------------------------------------------- */

/* Hand y to the dead-letter producer with its reason (y is gone then). */
static void send_letter(struct pw *w, struct pay *y, const char *why)
{
    struct cmsg *m = calloc(1, sizeof(*m));
    if (!m || !(m->error = strdup(why))) {
        /* held and never done: the offset waits, nothing is lost */
        log_error("payments: out of memory dead-lettering %s[%" PRId32 "]@%" PRId64,
                  w->cfg->kafka.payments_topic, y->partition, y->offset);
        free(m);
        pay_free(y);
        return;
    }
    log_summary_add(&w->said_letters, "%s[%" PRId32 "]@%" PRId64 ": %s", w->cfg->kafka.payments_topic,
                    y->partition, y->offset, why);
    m->partition = y->partition;
    m->offset = y->offset;
    m->epoch = y->epoch;
    m->payload = y->payload;
    m->payload_len = y->payload_len;
    m->key = y->key;
    m->key_len = y->key_len;
    y->payload = y->key = NULL;
    pay_free(y);
    kl_letter(w->k, m);
}

/* --- taking a payment fetched -------------------------------------------------------- */

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

void pw_take(struct pw *w, const rd_kafka_message_t *km)
{
    char why[256];
    struct pay *y;
    if (!(y = calloc(1, sizeof(*y))))
        goto oom;
    y->partition = km->partition;
    y->offset = km->offset;
    if (kl_track(w->k, km->partition, km->offset, &y->epoch) != 0) {
        free(y); /* a partition no longer ours */
        return;
    }
    y->payload = util_memdup(km->payload, km->len);
    y->payload_len = km->len;
    y->key = km->key ? util_memdup(km->key, km->key_len) : NULL;
    y->key_len = km->key ? km->key_len : 0;
    if (!y->payload || (km->key && !y->key)) {
        pay_free(y); /* tracked and never done: the offset waits */
        goto oom;
    }
    if (judge(km, &y->m, why, sizeof(why)) != 0) {
        send_letter(w, y, why);
        return;
    }
    int64_t block = y->m.order_id >> ORDER_ID_SEQ_BITS;
    if (block == 0) { /* identities start at 1: no producer has block 0 */
        CM_ADD(payments_never_issued, 1);
        send_letter(w, y, "order id never issued: its block is 0");
        return;
    }
    w->over_max += block > w->max_block; /* vet reads the blocks again */
    y->first_ms = y->due_ms = util_mono_ms();
    y->slot = y->first_kind = -1;
    pl_append(&w->fresh, y);
    return;
oom:
    log_error("payments: out of memory at %s[%" PRId32 "]@%" PRId64, w->cfg->kafka.payments_topic,
              km->partition, km->offset);
}

/* --- the orders looked for, without a lock ------------------------------------------ */

#define PW_UNKNOWN_WHY "order unknown: not in PostgreSQL within consumer.payment_wait_ms"

bool pw_wait_more(const struct cfg *c, struct pay *y, int64_t now)
{
    int shift = y->tries < 5 ? y->tries : 5;
    int64_t wait_ms = CFG_GET(c->consumer.payment_wait_ms);
    if (now - y->first_ms >= wait_ms)
        return false;
    y->tries++;
    int64_t ms = PW_WAIT_BASE_MS << shift, last = y->first_ms + wait_ms;
    y->due_ms = now + (ms < PW_WAIT_CAP_MS ? ms : PW_WAIT_CAP_MS);
    if (y->due_ms > last) /* one last look when the wait is over */
        y->due_ms = last;
    return true;
}

/* y waits for its order, at the end of the waiting set. The set holds at
 * most consumer.payment_wait_max payments and wait_bytes_max of them;
 * past either, the payment that has waited longest goes to the dead-letter
 * topic ("waiting set full", counted and alerted) to make room: nothing is
 * dropped unsaid, and a flood of payments for orders that never come cannot
 * hold more memory than that. */
void pw_wait_add(struct pw *w, struct pay *y)
{
    size_t max = (size_t)CFG_GET(w->cfg->consumer.payment_wait_max);
    while (w->wait.head && (w->wait.n >= max || w->wait.bytes + pay_bytes(y) > w->wait_bytes_max)) {
        CM_ADD(payments_wait_full, 1);
        send_letter(w, pl_unlink(&w->wait, &w->wait.head),
                    "waiting set full: consumer.payment_wait_max payments (or 64 MiB) wait for their orders");
    }
    log_repeat(&w->say_wait, LOG_LVL_NOTICE, "payments: waiting for orders",
               "payments: order %" PRId64 " of payment %s is not in PostgreSQL yet: it waits for it, as any "
               "other payment will whose order is not there (logged once while payments wait; "
               "seckill_consumer_payments_waiting)",
               y->m.order_id, y->m.ref);
    pl_append(&w->wait, y);
    w->wait_due = y->due_ms < w->wait_due ? y->due_ms : w->wait_due;
}

/* The highest order id block taken, into max_block (it never goes down). 0;
 * 1 when the consumer may not read it (migration 015 not applied: said
 * once while it lasts, and ids go unchecked rather than payments stopping);
 * -1 when PostgreSQL failed (said once while it lasts). */
static int read_max_block(struct pw *w)
{
    int64_t b;
    char err[512];
    int at = pgtrip_params(w->trip, "blocks", NULL, 0, PGRES_TUPLES_OK);
    enum pgt_status st = pgtrip_run(w->trip, err, sizeof(err));
    PGresult *r = pgtrip_result(w->trip, at);
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    int ret = 0;
    if (st == PGT_OK) {
        log_repeat_end(&w->say_blocks, "order_id_blocks read");
        if (PQntuples(r) == 1 && util_parse_i64(PQgetvalue(r, 0, 0), 0, INT64_MAX, &b) == 0 &&
            b > w->max_block)
            w->max_block = b;
    } else if (state && strcmp(state, "42501") == 0) {
        log_repeat(&w->say_blocks, LOG_LVL_WARNING, "payments: order_id_blocks",
                   "payments: postgres: the consumer may not read order_id_blocks (apply "
                   "sql/migrations/015_payment_order_ids.sql): payments for order ids never issued are not "
                   "refused at once, they wait consumer.payment_wait_ms (logged once while it lasts)");
        ret = 1;
    } else {
        log_repeat(w->say_pg, LOG_LVL_WARNING, "payments: postgres",
                   "payments: postgres: reading the highest order id block: %s; retried (logged once while "
                   "it lasts)",
                   err);
        ret = -1;
    }
    pgtrip_rollback(w->trip);
    return ret;
}

/* Refuse the fresh payments whose order id no producer could have issued:
 * its block (order.h: block << ORDER_ID_SEQ_BITS | seq) above the highest
 * order_id_blocks holds, read again when a payment names a block above the
 * one known. A producer takes a block in a committed transaction before it
 * hands out an id of it, so a payment for a real order never names a block
 * PostgreSQL does not have. (Block 0 is refused as it is taken: pw_take.)
 * Such an order never comes: waiting consumer.payment_wait_ms for it would
 * only hold the partition's offset back and fill the waiting set. 0, or -1
 * (PostgreSQL failed: the payments stay fresh). */
static int vet(struct pw *w)
{
    char why[160];
    int r;
    if (w->over_max == 0)
        return 0;
    if ((r = read_max_block(w)) != 0) {
        w->over_max = r > 0 ? 0 : w->over_max; /* not permitted: the payments go on unchecked */
        return r > 0 ? 0 : -1;
    }
    for (struct pay **pp = &w->fresh.head; *pp;) {
        struct pay *y = *pp;
        int64_t block = y->m.order_id >> ORDER_ID_SEQ_BITS;
        if (block <= w->max_block) {
            pp = &y->next;
            continue;
        }
        snprintf(why, sizeof(why),
                 "order id never issued: its block %" PRId64 " is above the highest taken (%" PRId64 ")",
                 block, w->max_block);
        CM_ADD(payments_never_issued, 1);
        send_letter(w, pl_unlink(&w->fresh, pp), why);
    }
    w->over_max = 0;
    return 0;
}

/* Queue pay_waiting.sql for the ids gathered in ids[0] (orders) and
 * ids[1] (users), and start the next chunk (libpq copied the arrays). */
static void look_chunk(struct pw *w)
{
    const struct pgarr *const a[] = { &w->ids[0], &w->ids[1] };
    pgarr_end(&w->ids[0]);
    pgarr_end(&w->ids[1]);
    pgtrip_arrays(w->trip, "waiting", a, 2, PGRES_TUPLES_OK);
    pgarr_begin(&w->ids[0], PGARR_INT8);
    pgarr_begin(&w->ids[1], PGARR_INT8);
}

/* y's order and user into the chunk; a full one is queued. */
static void look_add(struct pw *w, const struct pay *y, size_t *n)
{
    pgarr_add_i64(&w->ids[0], y->m.order_id);
    pgarr_add_i64(&w->ids[1], y->m.user_id);
    if (++*n % PW_LOOK_CHUNK == 0)
        look_chunk(w);
}

/* The orders each chunk found, into found. 0, or -1 out of memory. */
static int take_found(struct pw *w)
{
    for (int c = 0; c < w->trip->n; c++) {
        PGresult *r = pgtrip_result(w->trip, c);
        for (int k = 0; k < PQntuples(r); k++) {
            int64_t id;
            if (util_parse_i64(PQgetvalue(r, k, 0), 1, INT64_MAX, &id) == 0 && !i64map_put(&w->found, &id)) {
                log_error("payments: out of memory looking for the payments' orders; tried again");
                return -1;
            }
        }
    }
    return 0;
}

/* Look for the orders of every fresh payment and of the waiting ones that
 * are due: one statement per PW_LOOK_CHUNK of them, all in one round trip, the
 * orders found into found. 0, or -1. */
static int look_for(struct pw *w, int64_t now)
{
    size_t n = 0;
    int ret;
    i64map_clear(&w->found);
    pgarr_begin(&w->ids[0], PGARR_INT8);
    pgarr_begin(&w->ids[1], PGARR_INT8);
    for (struct pay *y = w->wait.head; y; y = y->next)
        if (y->due_ms <= now)
            look_add(w, y, &n);
    for (struct pay *y = w->fresh.head; y; y = y->next)
        look_add(w, y, &n);
    if (n % PW_LOOK_CHUNK != 0)
        look_chunk(w);
    if (n == 0)
        return 0;
    if (pgtrip_run_said(w->trip, w->say_pg, "payments", "looking for the payments' orders") != PGT_OK)
        return -1;
    ret = take_found(w);
    pgtrip_reset(w->trip);
    return ret;
}

/* The waiting payments whose order is found now become ready, behind the
 * ready ones, in the order they came, every payment of such an order (due
 * or not: a later payment of an order never overtakes the first); a due
 * one whose order is still nowhere is looked for again later, or, past
 * consumer.payment_wait_ms, goes to the dead-letter topic. Then the fresh
 * ones: ready, or waiting. */
static void sort_out(struct pw *w, int64_t now)
{
    w->wait_due = INT64_MAX;
    for (struct pay **pp = &w->wait.head; *pp;) {
        struct pay *y = *pp;
        if (i64map_has(&w->found, &y->m.order_id)) {
            y->due_ms = now;
            pl_append(&w->ready, pl_unlink(&w->wait, pp));
            continue;
        }
        if (y->due_ms <= now && !pw_wait_more(w->cfg, y, now)) {
            send_letter(w, pl_unlink(&w->wait, pp), PW_UNKNOWN_WHY);
            continue;
        }
        w->wait_due = y->due_ms < w->wait_due ? y->due_ms : w->wait_due;
        pp = &y->next;
    }
    while (w->fresh.head) {
        struct pay *y = pl_unlink(&w->fresh, &w->fresh.head);
        if (i64map_has(&w->found, &y->m.order_id))
            pl_append(&w->ready, y);
        else if (pw_wait_more(w->cfg, y, now))
            pw_wait_add(w, y);
        else /* fresh past the whole wait: PostgreSQL was down that long */
            send_letter(w, y, PW_UNKNOWN_WHY);
    }
}

/* Before any lock: only payments whose orders are found go on to the
 * batches, under the users' locks: a payment for an order that is not
 * there takes no lock and writes no fence, and however many wait, the
 * others' batches are not theirs to share. */
int pw_check(struct pw *w, int64_t now)
{
    if (w->fresh.n == 0 && (w->wait.n == 0 || now < w->wait_due))
        return 0;
    char err[512];
    if (pgsess_ready(w->trip->s, err, sizeof(err)) != 0 || vet(w) != 0 || look_for(w, now) != 0)
        return -1;
    sort_out(w, now);
    return 0;
}

/* --- done, refused, waiting again ------------------------------------------------------ */

void pw_done(struct pw *w, struct pay **pp)
{
    struct pay *y = pl_unlink(&w->ready, pp);
    kl_done(w->k, y->partition, y->epoch, y->offset);
    pay_free(y);
}

void pw_refuse(struct pw *w, struct pay **pp, const char *why)
{
    send_letter(w, pl_unlink(&w->ready, pp), why);
}

void pw_wait_again(struct pw *w, struct pay **pp, int64_t now)
{
    struct pay *y = pl_unlink(&w->ready, pp);
    if (pw_wait_more(w->cfg, y, now))
        pw_wait_add(w, y);
    else
        send_letter(w, y, PW_UNKNOWN_WHY);
}

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

void pw_drop(struct pw *w, const rd_kafka_topic_partition_list_t *parts)
{
    drop_from(&w->fresh, parts);
    drop_from(&w->ready, parts);
    drop_from(&w->wait, parts);
    CM_SET(payments_waiting, (int64_t)w->wait.n);
}

int64_t pw_after_turn(struct pw *w, bool force)
{
    if (w->wait.n == 0) {
        w->wait_due = INT64_MAX;
        log_repeat_end(&w->say_wait, "no payment waits for its order");
    }
    log_summary_flush(&w->said_letters, LOG_LVL_WARNING, "payments: ", "payments dead-lettered",
                      PW_SAY_LETTERS_MS, force);
    CM_SET(payments_waiting, (int64_t)w->wait.n);
    return w->wait_due;
}
