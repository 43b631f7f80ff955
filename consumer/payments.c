#include "payments.h"

#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bgthread.h"
#include "cmetrics.h"
#include "dlq.h"
#include "embed.h"
#include "jsonint.h"
#include "kconf.h"
#include "keys.h"
#include "lock.h"
#include "log.h"
#include "offsets.h"
#include "pgconn.h"
#include "queue.h"
#include "rfunc.h"
#include "rpipe.h"
#include "util.h"

#define PAY_VERSION 1
/* Payments held at once (waiting for their order, or for a service that is
 * down); beyond it fetching pauses until some are done. */
#define PAY_HELD_MAX 10000
/* Messages taken per turn before the held payments are tried again. */
#define PAY_BURST 500
/* A service down: nothing is tried for this long, doubling to the cap. */
#define PAY_BACKOFF_BASE_MS 100
#define PAY_BACKOFF_CAP_MS 5000
/* An order not persisted yet: looked for again after this long, doubling to
 * the cap (the orders topic is seldom more than a batch behind). */
#define PAY_WAIT_BASE_MS 50
#define PAY_WAIT_CAP_MS 1000
/* The user's lock held elsewhere, or a stale fence: tried again this soon. */
#define PAY_BUSY_MS 20
/* At a stop, how long dead letters sent may take to be acknowledged. */
#define PAY_STOP_LETTERS_MS 5000

static const char PAY_REF_CHARS[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:-";

/* One payment message on its way: from the poll to done (its offset may
 * move) or to the dead-letter producer. */
struct pay {
    struct pay *next;
    int32_t partition;
    int64_t offset;
    uint32_t epoch;
    struct pay_msg m;
    int64_t first_ms, due_ms; /* monotonic: seen first, next try */
    int tries;                /* times its order was looked for and not found */
    void *payload, *key;      /* raw, for a dead letter */
    size_t payload_len, key_len;
};

/* How one try at a payment went. */
enum pay_result {
    PAY_DONE,    /* paid, a replay, or recorded late: its offset may move */
    PAY_UNKNOWN, /* the order is nowhere yet: wait for it */
    PAY_BUSY,    /* the user's lock is held elsewhere, or the fence was stale: again soon */
    PAY_DOWN,    /* PostgreSQL or Redis failed: back off */
    PAY_REFUSE,  /* never payable: dead-letter it */
};

/* What a committed payment did, for the metrics and Redis. */
enum pay_kind { PK_APPLIED, PK_REPLAYED, PK_LATE };

struct paid {
    enum pay_kind kind;
    bool mark;             /* the order is paid: tell Redis */
    int64_t item_id, at_ms; /* its item, when it was paid */
    const char *then;      /* PK_LATE: late_payments.status_then */
};

struct payments {
    const struct cfg *cfg;
    /* cfg, but kafka.topic is the payments topic: the dead letters' source
     * (dlq.h reads both topics from the cfg it is given). */
    struct cfg dcfg;
    struct bgthread t;
    rd_kafka_t *rk;
    bool cooperative, paused;
    struct off_table *off;
    struct queue done; /* dead letters the broker acknowledged (dlq.h) */
    struct dlq *dlq;
    struct cmsg *dlq_retry; /* dead letters the producer would not queue yet */
    int letters;            /* dead letters sent and not acknowledged */
    struct pay *head, **tailp;
    size_t held, waiting;
    int64_t hold_until, next_due; /* monotonic */
    int fails;                    /* service failures in a row: the backoff's exponent */
    int64_t refuse_log_ms, refuse_quiet;
    struct lock_client *lc;
    PGconn *pg;
    struct rp *rp;
    struct rp_batch batch;
    struct rfunc fn; /* seckill_mark */
    _Atomic int fatal;
    _Atomic int kafka_err;
    struct log_repeat say_pg, say_redis, say_mark, say_kafka;
};

/* --- the message ------------------------------------------------------------ */

static int get_int(json_t *root, const char *name, int64_t min, int64_t max, int64_t *out, char *err,
                   size_t errlen)
{
    switch (jsonint_get(root, name, min, max, out)) {
    case JSONINT_OK: return 0;
    case JSONINT_MISSING: snprintf(err, errlen, "missing \"%s\"", name); break;
    case JSONINT_NOT_INTEGER: snprintf(err, errlen, "\"%s\" is not an integer", name); break;
    case JSONINT_OUT_OF_RANGE: snprintf(err, errlen, "\"%s\" out of range", name); break;
    }
    return -1;
}

static int get_strings(json_t *root, struct pay_msg *out, char *err, size_t errlen)
{
    json_t *id = json_object_get(root, "order_id"), *ref = json_object_get(root, "ref");
    size_t n;
    if (!id || !json_is_string(id)) {
        snprintf(err, errlen, "missing \"order_id\" string");
        return -1;
    }
    if (util_parse_i64(json_string_value(id), 1, INT64_MAX, &out->order_id) != 0) {
        snprintf(err, errlen, "\"order_id\" is not a positive 64-bit integer");
        return -1;
    }
    if (!ref || !json_is_string(ref) || (n = json_string_length(ref)) == 0 || n > PAY_REF_MAX ||
        strspn(json_string_value(ref), PAY_REF_CHARS) != n) {
        snprintf(err, errlen, "\"ref\" is not 1 to %d of [A-Za-z0-9_.:-]", PAY_REF_MAX);
        return -1;
    }
    memcpy(out->ref, json_string_value(ref), n + 1);
    return 0;
}

int pay_decode(const void *payload, size_t len, const void *key, size_t key_len, struct pay_msg *out,
               char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *root = json_loadb(payload, len, JSON_REJECT_DUPLICATES, &jerr);
    char want[24];
    int64_t v;
    int ret = -1, n;
    memset(out, 0, sizeof(*out));
    if (!root) {
        snprintf(err, errlen, "bad JSON: %s", jerr.text);
        return -1;
    }
    if (!json_is_object(root)) {
        snprintf(err, errlen, "not a JSON object");
        goto out;
    }
    if (get_int(root, "v", 0, INT64_MAX, &v, err, errlen) != 0)
        goto out;
    if (v != PAY_VERSION) {
        snprintf(err, errlen, "unknown version %lld", (long long)v);
        goto out;
    }
    if (get_strings(root, out, err, errlen) != 0 ||
        get_int(root, "user_id", 1, INT64_MAX, &out->user_id, err, errlen) != 0 ||
        get_int(root, "paid_at_ms", 1, PAY_AT_MAX_MS, &out->paid_at_ms, err, errlen) != 0)
        goto out;
    /* The key routes a user's payments to one partition, as it does their
     * orders: a payment keyed otherwise is not the user's. */
    n = snprintf(want, sizeof(want), "%" PRId64, out->user_id);
    if (!key || key_len != (size_t)n || memcmp(key, want, (size_t)n) != 0) {
        snprintf(err, errlen, "key is not the user id");
        goto out;
    }
    ret = 0;
out:
    json_decref(root);
    return ret;
}

/* --- the payments held ---------------------------------------------------------- */

static void pay_free(struct pay *y)
{
    if (!y)
        return;
    free(y->payload);
    free(y->key);
    free(y);
}

static void append(struct payments *p, struct pay *y)
{
    y->next = NULL;
    *p->tailp = y;
    p->tailp = &y->next;
    p->held++;
}

/* Take *pp (a payment of the list) out of it; returns it. */
static struct pay *unlink_at(struct payments *p, struct pay **pp)
{
    struct pay *y = *pp;
    *pp = y->next;
    if (p->tailp == &y->next)
        p->tailp = pp;
    y->next = NULL;
    p->held--;
    if (y->tries > 0)
        p->waiting--;
    return y;
}

static void store_offsets(struct payments *p)
{
    rd_kafka_topic_partition_list_t *l = NULL;
    for (int32_t i = 0; i < off_partitions(p->off); i++) {
        int64_t next;
        if (!off_advance(p->off, i, &next))
            continue;
        if (!l && !(l = rd_kafka_topic_partition_list_new(8)))
            return;
        rd_kafka_topic_partition_list_add(l, p->cfg->kafka.payments_topic, i)->offset = next;
    }
    if (!l)
        return;
    rd_kafka_resp_err_t e = rd_kafka_offsets_store(p->rk, l);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
        log_debug("payments: offsets_store: %s", rd_kafka_err2str(e));
    rd_kafka_topic_partition_list_destroy(l);
}

/* A payment done: its offset may move once those before it are done too. */
static void finish(struct payments *p, struct pay *y)
{
    off_done(p->off, y->partition, y->epoch, y->offset);
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
    if (util_mono_ms() - p->refuse_log_ms >= 1000) {
        log_warn("payments: %s[%" PRId32 "]@%" PRId64 " dead-lettered: %s (%" PRId64
                 " more since the last report)",
                 p->cfg->kafka.payments_topic, y->partition, y->offset, why, p->refuse_quiet);
        p->refuse_log_ms = util_mono_ms();
        p->refuse_quiet = 0;
    } else {
        p->refuse_quiet++;
    }
    m->partition = y->partition;
    m->offset = y->offset;
    m->epoch = y->epoch;
    m->payload = y->payload;
    m->payload_len = y->payload_len;
    m->key = y->key;
    m->key_len = y->key_len;
    y->payload = y->key = NULL;
    pay_free(y);
    p->letters++;
    if (dlq_send(p->dlq, m) != 0) {
        m->next = p->dlq_retry;
        p->dlq_retry = m;
    }
}

/* Dead letters the broker took: their offsets may move; and the ones the
 * producer would not queue before, sent again. */
static void serve_letters(struct payments *p)
{
    dlq_poll(p->dlq, 0);
    if (p->dlq_retry)
        p->dlq_retry = dlq_send_list(p->dlq, p->dlq_retry);
    for (struct cmsg *m = q_take_all(&p->done), *n; m; m = n) {
        n = m->next;
        CM_ADD(payments_dead_letter, 1);
        p->letters--;
        off_done(p->off, m->partition, m->epoch, m->offset);
        cmsg_free(m);
    }
}

/* --- PostgreSQL ------------------------------------------------------------------ */

/* libpq's message on one line (it spans lines; a log line must not). */
static void one_line(char *out, size_t len, const char *m)
{
    size_t n = strlen(m);
    while (n && (m[n - 1] == '\n' || m[n - 1] == ' '))
        n--;
    snprintf(out, len, "%.*s", (int)n, m);
    for (char *c = out; *c; c++)
        if (*c == '\n' || *c == '\t')
            *c = ' ';
}

static int pg_ready(struct payments *p)
{
    char err[512], idle[24];
    if (p->pg && PQstatus(p->pg) == CONNECTION_OK)
        return 0;
    PQfinish(p->pg);
    p->pg = NULL;
    if (pgconn_open(p->cfg, "seckill-consumer-payments", &p->pg, err, sizeof(err)) != 0) {
        log_repeat(&p->say_pg, LOG_LVL_WARNING, "payments: postgres",
                   "payments: postgres unreachable: %s; payments wait (logged once while it lasts)", err);
        return -1;
    }
    /* A session idle in a transaction past the lock's lease is ended by
     * the server (a consumer frozen mid-payment holds the user's row). */
    snprintf(idle, sizeof(idle), "%d", p->cfg->lock.ttl_ms);
    const char *v[] = { idle };
    PGresult *r = PQexecParams(p->pg, embed_cons_session, 1, NULL, v, NULL, NULL, 0);
    bool ok = PQresultStatus(r) == PGRES_TUPLES_OK;
    one_line(err, sizeof(err), PQresultErrorMessage(r));
    PQclear(r);
    if (!ok) {
        log_repeat(&p->say_pg, LOG_LVL_WARNING, "payments: postgres",
                   "payments: postgres: session settings: %s; retried (logged once while it lasts)", err);
        PQfinish(p->pg);
        p->pg = NULL;
        return -1;
    }
    return 0;
}

/* The transaction is over, whatever state it was in: rolled back when the
 * connection still holds one, dropped when the connection broke. */
static void pg_abort(struct payments *p)
{
    if (!p->pg)
        return;
    if (PQstatus(p->pg) != CONNECTION_OK) {
        PQfinish(p->pg);
        p->pg = NULL;
        return;
    }
    if (PQtransactionStatus(p->pg) != PQTRANS_IDLE)
        PQclear(PQexec(p->pg, "ROLLBACK"));
}

/* Run sql with n text parameters: the result, or NULL (said once while it
 * lasts; the transaction rolled back). */
static PGresult *pg_run(struct payments *p, const char *sql, int n, const char *const *v, ExecStatusType want,
                        const char *what)
{
    char why[512];
    PGresult *r = PQexecParams(p->pg, sql, n, NULL, v, NULL, NULL, 0);
    if (PQresultStatus(r) == want)
        return r;
    one_line(why, sizeof(why), PQresultErrorMessage(r)[0] ? PQresultErrorMessage(r) : PQerrorMessage(p->pg));
    log_repeat(&p->say_pg, LOG_LVL_WARNING, "payments: postgres",
               "payments: postgres: %s: %s; retried (logged once while it lasts)", what, why);
    PQclear(r);
    pg_abort(p);
    return NULL;
}

/* BEGIN and the user's fence. PAY_DONE when the payment may go on;
 * PAY_BUSY for a stale fence, PAY_DOWN (rolled back either way). */
static enum pay_result begin(struct payments *p, const struct pay *y, int64_t fence)
{
    char su[24], sf[24];
    snprintf(su, sizeof(su), "%" PRId64, y->m.user_id);
    snprintf(sf, sizeof(sf), "%" PRId64, fence);
    const char *v[] = { su, sf };
    PGresult *r = pg_run(p, "BEGIN", 0, NULL, PGRES_COMMAND_OK, "BEGIN");
    if (!r)
        return PAY_DOWN;
    PQclear(r);
    if (!(r = pg_run(p, embed_pay_fence, 2, v, PGRES_TUPLES_OK, "advancing the user's fence")))
        return PAY_DOWN;
    bool passed = PQntuples(r) == 1;
    PQclear(r);
    if (passed)
        return PAY_DONE;
    CM_ADD(stale_fence, 1);
    pg_abort(p);
    return PAY_BUSY;
}

/* The order, found paid by this payment before: a replay (told again to
 * Redis, which keeps 'p' as it is: the commit may have been the last thing a
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

/* Why the payment paid nothing, from pay_order.sql's rows: into *out, or
 * PAY_UNKNOWN (nowhere yet), PAY_REFUSE (why), PAY_BUSY (still pending:
 * never, as the update would have paid it; tried again). */
static enum pay_result classify(const struct pay *y, PGresult *r, struct paid *out, char *why, size_t whylen)
{
    static const char *const late[] = { "expired", "cancelled", "final" };
    bool refused = false, other_user = false;
    for (int i = 0; i < PQntuples(r); i++) {
        const char *status = PQgetvalue(r, i, 1);
        int64_t u = 0;
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
    if (other_user) {
        snprintf(why, whylen, "order %" PRId64 " is not user %" PRId64 "'s", y->m.order_id, y->m.user_id);
        return PAY_REFUSE;
    }
    return PAY_UNKNOWN;
}

/* In the transaction begun: pay the order, or find out why not and record
 * a late payment. PAY_DONE with *out (to commit), or another result (rolled
 * back). */
static enum pay_result decide(struct payments *p, const struct pay *y, struct paid *out, char *why,
                              size_t whylen)
{
    char so[24], su[24], sa[24];
    snprintf(so, sizeof(so), "%" PRId64, y->m.order_id);
    snprintf(su, sizeof(su), "%" PRId64, y->m.user_id);
    snprintf(sa, sizeof(sa), "%" PRId64, y->m.paid_at_ms);
    const char *v[] = { so, su, sa, y->m.ref, NULL };
    PGresult *r = pg_run(p, embed_pay_apply, 4, v, PGRES_TUPLES_OK, "paying the order");
    if (!r)
        return PAY_DOWN;
    if (PQntuples(r) == 1) {
        out->kind = PK_APPLIED;
        out->at_ms = y->m.paid_at_ms;
        out->mark = util_parse_i64(PQgetvalue(r, 0, 0), 1, INT64_MAX, &out->item_id) == 0;
        PQclear(r);
        return PAY_DONE;
    }
    PQclear(r);
    if (!(r = pg_run(p, embed_pay_order, 2, v, PGRES_TUPLES_OK, "reading the order")))
        return PAY_DOWN;
    enum pay_result res = classify(y, r, out, why, whylen);
    PQclear(r);
    if (res != PAY_DONE || out->kind != PK_LATE) {
        if (res != PAY_DONE)
            pg_abort(p);
        return res;
    }
    v[4] = out->then;
    if (!(r = pg_run(p, embed_pay_late, 5, v, PGRES_COMMAND_OK, "recording a late payment")))
        return PAY_DOWN;
    /* Recorded before (a replay): the command tag says 0 rows. */
    if (strcmp(PQcmdTuples(r), "1") != 0)
        out->kind = PK_REPLAYED;
    PQclear(r);
    return PAY_DONE;
}

/* One transaction under the user's lock l: fence, payment, commit. */
static enum pay_result pay_txn(struct payments *p, const struct pay *y, struct lock *l, struct paid *out,
                               char *why, size_t whylen)
{
    enum pay_result res;
    if (pg_ready(p) != 0)
        return PAY_DOWN;
    if ((res = begin(p, y, lock_fence(l))) != PAY_DONE)
        return res;
    if ((res = decide(p, y, out, why, whylen)) != PAY_DONE)
        return res;
    /* The last look at the lease; losing it during the commit is what the
     * fence (whose row this transaction holds) is for. */
    if (lock_lost(l)) {
        pg_abort(p);
        return PAY_BUSY;
    }
    PGresult *r = pg_run(p, "COMMIT", 0, NULL, PGRES_COMMAND_OK, "COMMIT");
    if (!r)
        return PAY_DOWN;
    /* COMMIT of a transaction the server had aborted answers ROLLBACK. */
    bool committed = strcmp(PQcmdStatus(r), "COMMIT") == 0;
    PQclear(r);
    if (!committed) {
        log_repeat(&p->say_pg, LOG_LVL_WARNING, "payments: postgres",
                   "payments: postgres: COMMIT: the server rolled back; retried (logged once while it "
                   "lasts)");
        return PAY_DOWN;
    }
    log_repeat_end(&p->say_pg, "a payment committed");
    return PAY_DONE;
}

/* --- Redis ------------------------------------------------------------------------ */

/* The order's state in the item's orders hash becomes 'p' (seckill_mark),
 * best effort: PostgreSQL has it paid whatever Redis says. */
static void mark_paid(struct payments *p, int64_t item, int64_t order, int64_t at_ms)
{
    char key[KEYS_MAX], so[24], sa[24], err[256] = "", why[256] = "";
    const redisReply *r;
    if (!p->rp && rp_open(p->cfg, cfg_role_self(), &p->rp, err, sizeof(err)) != 0)
        goto fail;
    if (keys_item(key, sizeof(key), p->cfg->redis.key_prefix, item, KEYS_ITEM_ORDERS) < 0) {
        snprintf(err, sizeof(err), "the item's key is too long");
        goto fail;
    }
    snprintf(so, sizeof(so), "%" PRId64, order);
    snprintf(sa, sizeof(sa), "%" PRId64, at_ms);
    const char *argv[] = { key, so, "p", sa };
    rp_batch_reset(&p->batch);
    if (rp_fcall(&p->batch, p->fn.name, 1, 3, argv, NULL) < 0) {
        snprintf(err, sizeof(err), "out of memory");
        goto fail;
    }
    rp_run(p->rp, &p->batch, err, sizeof(err));
    r = rp_reply(&p->batch, 0);
    if (rp_status(&p->batch, 0) == RP_OK && r && r->type == REDIS_REPLY_INTEGER) {
        log_repeat_end(&p->say_mark, "a paid order marked");
        return;
    }
    if (p->batch.missing > 0)
        rfunc_missing_text(&p->fn, why, sizeof(why));
    else if (r && r->type == REDIS_REPLY_ERROR)
        snprintf(why, sizeof(why), "%s", r->str);
    if (why[0])
        snprintf(err, sizeof(err), "%s", why);
fail:
    CM_ADD(redis_errors, 1);
    log_repeat(&p->say_mark, LOG_LVL_WARNING, "payments: redis mark",
               "payments: redis: %s; paid orders still show as waiting in the buyers' status calls "
               "(PostgreSQL has them paid; logged once while it lasts)",
               err[0] ? err : "not answered");
}

static int lock_open(struct payments *p)
{
    char err[256];
    if (lock_client_open(p->cfg, &p->lc, err, sizeof(err)) == 0)
        return 0;
    p->lc = NULL;
    log_repeat(&p->say_redis, LOG_LVL_WARNING, "payments: redis",
               "payments: redis: %s; no user's lock, payments wait (logged once while it lasts)", err);
    return -1;
}

/* The lock client's counters beside the workers' (cm.lock, summed), in the
 * slot after theirs. */
static void publish_lock_counters(struct payments *p)
{
    struct lock_counters lcnt;
    int slot = p->cfg->consumer.workers;
    if (!p->lc || slot < 0 || slot >= CM_MAX_WORKERS)
        return;
    lock_client_counters(p->lc, &lcnt);
#define CM_X(m, name, help) atomic_store_explicit(&cm.lock[slot].m, lcnt.m, memory_order_relaxed);
    CM_LOCK_COUNTERS(CM_X)
#undef CM_X
}

/* --- one payment ---------------------------------------------------------------- */

static void count(const struct pay *y, const struct paid *d)
{
    switch (d->kind) {
    case PK_APPLIED: CM_ADD(payments_applied, 1); break;
    case PK_REPLAYED: CM_ADD(payments_replayed, 1); break;
    case PK_LATE:
        CM_ADD(late_payments, 1);
        log_notice("payments: payment %s of order %" PRId64 " (user %" PRId64 ") came when the order was %s: "
                   "recorded in late_payments, the order and the stock left alone",
                   y->m.ref, y->m.order_id, y->m.user_id, d->then);
        break;
    }
}

/* Lock the user, write the payment, release, tell Redis. */
static enum pay_result attempt(struct payments *p, const struct pay *y, char *why, size_t whylen)
{
    char name[48];
    struct lock *l = NULL;
    struct paid d = { 0 };
    if (!p->lc && lock_open(p) != 0)
        return PAY_DOWN;
    snprintf(name, sizeof(name), "user:%" PRId64, y->m.user_id);
    int st = lock_acquire(p->lc, name, 0, CFG_GET(p->cfg->lock.wait_ms), &l);
    if (st == LOCK_BUSY) {
        CM_ADD(lock_busy, 1);
        return PAY_BUSY;
    }
    if (st != LOCK_OK) {
        CM_ADD(redis_errors, 1);
        log_repeat(&p->say_redis, LOG_LVL_WARNING, "payments: redis",
                   "payments: redis: no user's lock (the lock's call failed); payments wait (logged once "
                   "while it lasts)");
        return PAY_DOWN;
    }
    log_repeat_end(&p->say_redis, "a user's lock taken");
    enum pay_result res = pay_txn(p, y, l, &d, why, whylen);
    lock_release(p->lc, l);
    if (res != PAY_DONE)
        return res;
    count(y, &d);
    if (d.mark)
        mark_paid(p, d.item_id, y->m.order_id, d.at_ms);
    return PAY_DONE;
}

/* After a try that found the order nowhere: wait longer, or give up. */
static bool wait_more(struct payments *p, struct pay *y, int64_t now)
{
    int shift = y->tries < 5 ? y->tries : 5;
    if (now - y->first_ms >= CFG_GET(p->cfg->consumer.payment_wait_ms))
        return false;
    if (y->tries++ == 0) {
        p->waiting++;
        log_info("payments: order %" PRId64 " of payment %s is not in PostgreSQL yet: waiting for it",
                 y->m.order_id, y->m.ref);
    }
    int64_t ms = PAY_WAIT_BASE_MS << shift, last = y->first_ms + CFG_GET(p->cfg->consumer.payment_wait_ms);
    y->due_ms = now + (ms < PAY_WAIT_CAP_MS ? ms : PAY_WAIT_CAP_MS);
    if (y->due_ms > last) /* one last look when the wait is over */
        y->due_ms = last;
    return true;
}

/* A service failed: nothing is tried before the backoff is over. */
static void hold(struct payments *p, int64_t now)
{
    int shift = p->fails < 6 ? p->fails : 6;
    p->fails++;
    int64_t ms = PAY_BACKOFF_BASE_MS << shift;
    p->hold_until = now + (ms < PAY_BACKOFF_CAP_MS ? ms : PAY_BACKOFF_CAP_MS);
}

/* Try every payment that is due, in arrival order; what is done leaves the
 * list. Stops at a service failure (hold). */
static void work(struct payments *p)
{
    int64_t now = util_mono_ms();
    char why[256];
    p->next_due = INT64_MAX;
    for (struct pay **pp = &p->head; *pp && !bgt_stopping(&p->t);) {
        struct pay *y = *pp;
        if (now < p->hold_until) {
            p->next_due = p->hold_until;
            break;
        }
        if (y->due_ms > now) {
            p->next_due = y->due_ms < p->next_due ? y->due_ms : p->next_due;
            pp = &y->next;
            continue;
        }
        why[0] = '\0';
        enum pay_result res = attempt(p, y, why, sizeof(why));
        now = util_mono_ms();
        if (res != PAY_DOWN)
            p->fails = 0;
        if (res == PAY_DONE) {
            finish(p, unlink_at(p, pp));
        } else if (res == PAY_REFUSE) {
            dead_letter(p, unlink_at(p, pp), why);
        } else if (res == PAY_UNKNOWN && !wait_more(p, y, now)) {
            dead_letter(p, unlink_at(p, pp),
                        "order unknown: not in PostgreSQL within consumer.payment_wait_ms");
        } else {
            if (res == PAY_BUSY)
                y->due_ms = now + PAY_BUSY_MS;
            else if (res == PAY_DOWN)
                hold(p, now);
            p->next_due = y->due_ms < p->next_due ? y->due_ms : p->next_due;
            pp = &y->next;
        }
    }
    CM_SET(payments_waiting, (int64_t)p->waiting);
    publish_lock_counters(p);
}

/* --- Kafka -------------------------------------------------------------------------- */

static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    struct payments *p = opaque;
    if (kconf_fatal(rk, err, &p->fatal))
        return;
    /* A broker down or a refusal is the pipeline's news too (its error
     * callback says it once); said here at debug level. */
    if (kconf_refused(err, reason) || err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN ||
        err == RD_KAFKA_RESP_ERR__TRANSPORT) {
        log_debug("payments: kafka: %s: %s", rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
        return;
    }
    if (atomic_exchange(&p->kafka_err, err) != err)
        log_warn("payments: kafka: %s: %s", rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

static void set_paused(struct payments *p, bool pause)
{
    rd_kafka_topic_partition_list_t *a = NULL;
    if (pause == p->paused || rd_kafka_assignment(p->rk, &a) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return;
    rd_kafka_resp_err_t e =
        pause ? rd_kafka_pause_partitions(p->rk, a) : rd_kafka_resume_partitions(p->rk, a);
    rd_kafka_topic_partition_list_destroy(a);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
        return;
    p->paused = pause;
    if (pause)
        log_notice("payments: %zu payments held (waiting for their orders or a service): fetching paused",
                   p->held);
    else
        log_notice("payments: fetching resumed");
}

/* Partitions taken away: what is held for them is the next owner's to read
 * again (their offsets never moved past it). */
static void drop_partitions(struct payments *p, const rd_kafka_topic_partition_list_t *parts)
{
    for (struct pay **pp = &p->head; *pp;) {
        bool gone = false;
        for (int i = 0; i < parts->cnt && !gone; i++)
            gone = parts->elems[i].partition == (*pp)->partition;
        if (gone)
            pay_free(unlink_at(p, pp));
        else
            pp = &(*pp)->next;
    }
    for (int i = 0; i < parts->cnt; i++)
        off_revoke(p->off, parts->elems[i].partition);
    CM_SET(payments_waiting, (int64_t)p->waiting);
}

static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *parts,
                         void *opaque)
{
    struct payments *p = opaque;
    rd_kafka_error_t *kerr = NULL;
    const char *proto = rd_kafka_rebalance_protocol(rk);
    if (proto)
        p->cooperative = strcmp(proto, "COOPERATIVE") == 0;
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        for (int i = 0; i < parts->cnt; i++) {
            uint32_t epoch;
            if (off_assign(p->off, parts->elems[i].partition, &epoch) != 0)
                log_error("payments: out of memory tracking partition %" PRId32, parts->elems[i].partition);
        }
        if (p->cooperative)
            kerr = rd_kafka_incremental_assign(rk, parts);
        else
            rd_kafka_assign(rk, parts);
        if (p->paused)
            rd_kafka_pause_partitions(rk, parts);
        if (parts->cnt > 0)
            log_notice("payments: assigned %d partitions of %s", parts->cnt, p->cfg->kafka.payments_topic);
    } else {
        if (err == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS && !rd_kafka_assignment_lost(rk)) {
            store_offsets(p);
            rd_kafka_resp_err_t e = rd_kafka_commit(rk, NULL, 0);
            if (e != RD_KAFKA_RESP_ERR_NO_ERROR && e != RD_KAFKA_RESP_ERR__NO_OFFSET)
                log_warn("payments: kafka: offset commit: %s", rd_kafka_err2str(e));
        }
        drop_partitions(p, parts);
        if (p->cooperative)
            kerr = rd_kafka_incremental_unassign(rk, parts);
        else
            rd_kafka_assign(rk, NULL);
        if (parts->cnt > 0)
            log_notice("payments: revoked %d partitions of %s", parts->cnt, p->cfg->kafka.payments_topic);
    }
    if (kerr) {
        log_error("payments: kafka: rebalance: %s", rd_kafka_error_string(kerr));
        rd_kafka_error_destroy(kerr);
    }
}

static void *dup_bytes(const void *b, size_t n)
{
    void *d = malloc(n ? n : 1);
    if (d && n)
        memcpy(d, b, n);
    return d;
}

/* A message fetched: held as a payment, or dead-lettered. */
static void take(struct payments *p, const rd_kafka_message_t *km)
{
    char why[256];
    struct pay *y;
    if (km->err) {
        if (km->err == RD_KAFKA_RESP_ERR__PARTITION_EOF || kconf_fatal(p->rk, km->err, &p->fatal))
            return;
        log_repeat(&p->say_kafka, LOG_LVL_WARNING, rd_kafka_err2name(km->err),
                   "payments: kafka: %s (logged once while it lasts)", rd_kafka_message_errstr(km));
        return;
    }
    log_repeat_end(&p->say_kafka, "a payment fetched");
    if (!(y = calloc(1, sizeof(*y))))
        goto oom;
    y->partition = km->partition;
    y->offset = km->offset;
    if (off_track(p->off, km->partition, km->offset, &y->epoch) != 0) {
        free(y); /* a partition no longer ours */
        return;
    }
    y->payload = dup_bytes(km->payload, km->len);
    y->payload_len = km->len;
    y->key = km->key ? dup_bytes(km->key, km->key_len) : NULL;
    y->key_len = km->key ? km->key_len : 0;
    if (!y->payload || (km->key && !y->key)) {
        pay_free(y); /* tracked and never done: the offset waits */
        goto oom;
    }
    if (pay_decode(km->payload, km->len, km->key, km->key_len, &y->m, why, sizeof(why)) != 0) {
        dead_letter(p, y, why);
        return;
    }
    y->first_ms = y->due_ms = util_mono_ms();
    append(p, y);
    return;
oom:
    log_error("payments: out of memory at %s[%" PRId32 "]@%" PRId64, p->cfg->kafka.payments_topic,
              km->partition, km->offset);
}

/* Fetch for up to wait_ms, then whatever else is there now. */
static void fetch(struct payments *p, int wait_ms)
{
    rd_kafka_message_t *km = rd_kafka_consumer_poll(p->rk, wait_ms);
    for (int n = 1; km; n++) {
        take(p, km);
        rd_kafka_message_destroy(km);
        km = n < PAY_BURST && p->held < PAY_HELD_MAX ? rd_kafka_consumer_poll(p->rk, 0) : NULL;
    }
}

/* --- the thread ------------------------------------------------------------------- */

static void *run(void *arg)
{
    struct payments *p = arg;
    while (!bgt_stopping(&p->t)) {
        serve_letters(p);
        work(p);
        set_paused(p, p->held >= PAY_HELD_MAX);
        int64_t wait = p->next_due == INT64_MAX ? 100 : p->next_due - util_mono_ms();
        fetch(p, (int)(wait < 0 ? 0 : wait > 100 ? 100 : wait));
        store_offsets(p);
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

static int kafka_open(struct payments *p, char *err, size_t errlen)
{
    const struct cfg *c = p->cfg;
    char group[512], kerr[512];
    rd_kafka_topic_partition_list_t *sub;
    rd_kafka_conf_t *conf = kconf_new(c, &c->kafka.consumer_properties, pay_defaults, err, errlen);
    if (!conf)
        return -1;
    snprintf(group, sizeof(group), "%s.payments", c->consumer.group_id);
    if (kconf_set(conf, "group.id", group, err, errlen) != 0 ||
        kconf_set(conf, "partition.assignment.strategy", "cooperative-sticky", err, errlen) != 0 ||
        kconf_set(conf, "enable.auto.offset.store", "false", err, errlen) != 0 ||
        (c->consumer.instance_id[0] &&
         kconf_set(conf, "group.instance.id", c->consumer.instance_id, err, errlen) != 0)) {
        rd_kafka_conf_destroy(conf);
        return -1;
    }
    rd_kafka_conf_set_opaque(conf, p);
    rd_kafka_conf_set_error_cb(conf, error_cb);
    rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
    if (!(p->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, kerr, sizeof(kerr)))) {
        rd_kafka_conf_destroy(conf);
        snprintf(err, errlen, "payments consumer: %s", kerr);
        return -1;
    }
    kconf_track(p->rk);
    rd_kafka_poll_set_consumer(p->rk);
    if (!(sub = rd_kafka_topic_partition_list_new(1))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    rd_kafka_topic_partition_list_add(sub, c->kafka.payments_topic, RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t e = rd_kafka_subscribe(p->rk, sub);
    rd_kafka_topic_partition_list_destroy(sub);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
        snprintf(err, errlen, "kafka subscribe %s: %s", c->kafka.payments_topic, rd_kafka_err2str(e));
        return -1;
    }
    log_notice("payments: consuming %s as group %s", c->kafka.payments_topic, group);
    return 0;
}

static void close_all(struct payments *p)
{
    if (p->rk) {
        /* Leaves the group; the revoke callback commits what was stored. */
        rd_kafka_resp_err_t e = rd_kafka_consumer_close(p->rk);
        if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
            log_warn("payments: kafka: consumer close: %s", rd_kafka_err2str(e));
        kconf_untrack(p->rk);
        rd_kafka_destroy(p->rk);
    }
    if (p->dlq)
        dlq_close(p->dlq, 1000);
    cmsg_free_list(p->dlq_retry);
    while (p->head)
        pay_free(unlink_at(p, &p->head));
    if (p->off)
        off_close(p->off);
    q_destroy(&p->done);
    if (p->lc)
        lock_client_close(p->lc);
    PQfinish(p->pg);
    rp_close(p->rp);
    rp_batch_free(&p->batch);
    free(p);
}

int payments_start(const struct cfg *c, struct payments **out, char *err, size_t errlen)
{
    struct payments *p = calloc(1, sizeof(*p));
    if (!p || q_init(&p->done) != 0) {
        free(p);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    p->cfg = c;
    p->dcfg = *c;
    p->dcfg.kafka.topic = c->kafka.payments_topic;
    p->cooperative = true;
    p->tailp = &p->head;
    p->refuse_log_ms = INT64_MIN / 2;
    p->fn = (struct rfunc)RFUNC_INIT("seckill_mark", RFUNC_LIB_RETURN);
    rp_batch_init(&p->batch);
    if (off_open(&p->off) != 0) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (dlq_open(&p->dcfg, &p->done, &p->dlq, err, errlen) != 0 || kafka_open(p, err, errlen) != 0)
        goto fail;
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
    return p && (atomic_load(&p->fatal) != 0 || (p->dlq && dlq_fatal(p->dlq)));
}

void payments_stop(struct payments *p)
{
    if (!p)
        return;
    bgt_stop(&p->t);
    /* The dead letters sent: their offsets may move once the broker has them. */
    for (int64_t end = util_mono_ms() + PAY_STOP_LETTERS_MS; p->letters > 0 && util_mono_ms() < end;) {
        dlq_poll(p->dlq, 50);
        serve_letters(p);
    }
    store_offsets(p);
    close_all(p);
}
