#include "reserve.h"

#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bgthread.h"
#include "bkmap.h"
#include "bucket.h"
#include "daemon.h"
#include "fifo.h"
#include "funclibs.h"
#include "i64map.h"
#include "keys.h"
#include "log.h"
#include "order.h"
#include "ordersig.h"
#include "orderidx.h"
#include "pmetrics.h"
#include "rlink.h"
#include "rfunc.h"
#include "rpipe.h"
#include "util.h"
#include "xfer.h"

/* Reservations per pipelined round trip. Larger batches only add latency
 * for the first request of the batch. */
#define RSV_BATCH 256

/* A buy whose bucket ran dry is tried again after a refill, this many
 * reservation calls in all; one that finds its bucket dry each time (other
 * threads and producers took the units first) hears 503, to come again. */
#define RSV_TRIES 4
/* Units one refill asks of the reserve: enough that a busy bucket refills
 * now and then, not at every buy; few enough that units rarely wait in a
 * bucket whose buyers stopped coming (they are taken from there when every
 * other slot is dry). A bucket that runs dry again within REFILL_FAST_MS of
 * its last refill asks twice as many as that one did, up to REFILL_MAX: a
 * refill is three round trips while the thread's batch waits, and a hot
 * bucket of a 20,000-unit sale refilled 64 at a time cost 313 of them
 * (bench/clustersale). */
#define REFILL_UNITS 64
#define REFILL_MAX 4096
#define REFILL_FAST_MS 1000
/* Refills left half done that this thread finishes once Redis answers. */
#define UNFINISHED_MAX 64

/* A bucket's last refill from the reserve: the units it asked, and when. */
struct refill_size {
    int64_t units, at_ms;
};

/* A unit to give back that Redis could not take when it was due. */
struct restore_job {
    int64_t user_id, item_id, order_id, reserved_at_ms;
    int salt; /* the slot the reservation is in */
    struct restore_job *next;
};

/* A request of the batch being reserved, with what its seckill_reserve call
 * sends: its item's keys, and the arguments as text. */
struct batch_entry {
    struct rsv_req *req;
    char keys[KEYS_ITEM_PARTS][KEYS_MAX];
    char user[24], oid[24], ts[24];
    char msg[ORDER_MSG_MAX];
    size_t msg_len;
    /* An admitted buy's (seckill_reserve_admitted): the room's admissions
     * outstanding and spent, and what the token names. */
    char adm_keys[2][KEYS_MAX];
    char adm_starts[24], adm_expires[24], adm_nonce[24];
};

/* An order to index for its buyer's status calls before the answer goes
 * out: acknowledged by Kafka (RSV_ACCEPTED: also marked published), or
 * reserved with an outcome not known yet (RSV_UNKNOWN: left unpublished,
 * for the sweeper). */
struct mark {
    int64_t item_id;
    int salt;
    char oid[ORDER_ID_STR_MAX];
    struct rsv_req *req;
    enum rsv_outcome outcome;
};

struct rsv {
    const struct cfg *cfg;
    struct pub *pub;
    struct oid_gen *gen;
    struct rlink link; /* this thread's Redis */
    struct rfunc reserve, reserve_admitted, restore;
    /* The round trips' batches (kept: their memory is reused): the
     * reservations, the marks, the give-backs, the lookups of an ambiguous
     * batch. */
    struct rp_batch calls, marking, giving, asking, stocks;

    /* The items' buckets (bkmap.h); the items known to have no unit in any
     * slot (item -> monotonic ms until which it is taken as so, a sold-out
     * mark's staleness: producer.soldout_refresh_ms); buys to try again
     * (their bucket refilled, or sent to an item's own slot after it got
     * buckets); refills left half done (item, source salt). */
    struct bkmap *bk;
    struct i64map dry;
    struct i64map refills; /* (item, salt) -> struct refill_size */
    struct rsv_req *again[RSV_BATCH];
    size_t nagain;
    struct {
        int64_t item;
        int from;
    } unfinished[UNFINISHED_MAX];
    size_t nunfinished;

    struct bgthread t;
    struct fifo in, reports; /* submitted; delivery reports (under t.mu) */

    struct restore_job *backlog;
    struct batch_entry entries[RSV_BATCH];
    struct mark marks[RSV_BATCH];
    size_t nmarks;
    /* Per request while they last: said once, counted, said over. */
    struct log_repeat say_no_ids, say_unknown_code;
};

/* --- outcomes ------------------------------------------------------------ */

static const struct {
    long long code;
    unsigned http;
    const char *json;
} outcomes[] = {
#define RSV_ROW(name, code, http, json, metric) { code, http, json },
    RSV_OUTCOMES(RSV_ROW)
#undef RSV_ROW
};

/* The outcome of a script code into *o; false for a code the table does
 * not know. */
static bool rsv_outcome_of_code(long long code, enum rsv_outcome *o)
{
    for (size_t i = 0; i < ARRAY_SIZE(outcomes); i++)
        if (outcomes[i].code == code && code != RSV_NO_CODE) {
            *o = (enum rsv_outcome)i;
            return true;
        }
    return false;
}

enum adm_reason rsv_admission_reason(enum rsv_outcome o, enum adm_reason adm)
{
    switch (o) {
    case RSV_ADMISSION_REQUIRED: return ADM_MISSING;
    case RSV_ADMISSION_USED: return ADM_USED;
    case RSV_ADMISSION_LAPSED: return ADM_LAPSED;
    case RSV_ADMISSION_OTHER_SALE: return ADM_OTHER_SALE;
    case RSV_ADMISSION_INVALID: return adm;
    default: return ADM_OK;
    }
}

unsigned rsv_http_status(enum rsv_outcome o) { return outcomes[o].http; }
const char *rsv_json_status(enum rsv_outcome o) { return outcomes[o].json; }

void rsv_count(enum rsv_outcome o)
{
    switch (o) {
#define RSV_CASE(name, code, http, json, metric) \
    case RSV_##name: PM_INC(metric); break;
        RSV_OUTCOMES(RSV_CASE)
#undef RSV_CASE
    }
}

/* --- Redis connection --------------------------------------------------- */

/* After each connect and new slot map: the producer's library, at this
 * build's version or newer, on every primary. While it is missing (a Redis
 * that lost its files, a FUNCTION FLUSH, a primary nobody loaded) the link
 * stays down: orders are refused (503), the reason logged once, the gauge
 * set, until an operator loads it. The producer never loads code itself
 * (docs/security.md). */
static enum rfunc_status check_functions(struct rp *p, void *arg, char *err, size_t errlen)
{
    (void)arg;
    enum rfunc_status st = rfunc_check_all(p, &funclib_producer, NULL, NULL, err, errlen);
    if (st != RFUNC_UNREACHABLE)
        PM_SET(redis_functions_missing, st == RFUNC_MISSING);
    return st;
}

/* A reply said a function is missing: down until it is loaded again (the
 * next rlink_ok() checks the library). */
static void functions_lost(struct rsv *r, const struct rfunc *f)
{
    char why[512];
    rfunc_missing_text(f, why, sizeof(why));
    PM_SET(redis_functions_missing, 1);
    rlink_down(&r->link, why);
}

/* --- completing requests ------------------------------------------------ */

static void finish(struct rsv_req *q, enum rsv_outcome o)
{
    q->outcome = o;
    q->complete(q);
}

/* --- giving units back -------------------------------------------------- */

static void backlog_add(struct rsv *r, const struct restore_job *j)
{
    struct restore_job *c = malloc(sizeof(*c));
    if (!c) {
        /* The reservation stays: the sweeper re-publishes it, so it is sold,
         * not lost. */
        log_error("out of memory keeping a give-back of order %" PRId64, j->order_id);
        return;
    }
    *c = *j;
    c->next = r->backlog;
    r->backlog = c;
}

static int move(struct rsv *r, struct xfer *x, int64_t *moved);

/* Units given back in a bucket go on to the item's reserve, each by a
 * transfer of one unit (xfer.h; issue #57: every unit that comes back goes
 * to the reserve, never to the bucket of the buyer who gave it up). A unit
 * another buyer of the bucket took meanwhile stays sold (the transfer moves
 * only what the bucket holds); a transfer left half done is finished as a
 * refill's is (unfinished_retry). */
static void back_to_reserve(struct rsv *r, const struct restore_job *jobs, const bool *given, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct xfer x = { .item = jobs[i].item_id, .from = jobs[i].salt, .to = BUCKET_HOME, .want = 1 };
        int64_t moved = 0;
        if (given[i] && jobs[i].salt != BUCKET_HOME && move(r, &x, &moved) == 0)
            PM_ADD(xfer_given_back, moved);
    }
}

/* Give n units back in one round trip (each to its item's shard); what
 * Redis cannot take now waits in the backlog for the next turn. The batch is
 * durable (rpipe.h): a give-back fewer replicas hold than
 * redis.min_replicas_ack asks is not done either, for a failover would bring
 * its reservation back, and the sweeper would publish an order whose buyer
 * was told it failed. given, when not NULL, says for each job whether its
 * unit is back now (n at most RSV_BATCH then); one kept by a sweeper's claim
 * or left for the backlog may still become an order. */
static void restore_many(struct rsv *r, const struct restore_job *jobs, size_t n, bool *given_out)
{
    struct rp_batch *b = &r->giving;
    size_t i, sent = 0;
    bool held, given[RSV_BATCH] = { false };
    if (given_out)
        memset(given_out, 0, n * sizeof(*given_out));
    if (n == 0)
        return;
    rp_batch_reset(b);
    if (!rlink_ok(&r->link))
        goto later;
    for (; sent < n && sent < RSV_BATCH; sent++) {
        char keys[KEYS_ITEM_PARTS][KEYS_MAX], user[24], oid[24], ts[24];
        const struct restore_job *j = &jobs[sent];
        if (keys_item_all_at(keys, r->cfg->redis.key_prefix, j->item_id, j->salt) != 0)
            break;
        snprintf(user, sizeof(user), "%" PRId64, j->user_id);
        snprintf(oid, sizeof(oid), "%" PRId64, j->order_id);
        snprintf(ts, sizeof(ts), "%" PRId64, j->reserved_at_ms);
        const char *argv[] = { keys[KEYS_ITEM_STOCK], keys[KEYS_ITEM_BUYERS], keys[KEYS_ITEM_PENDING],
                               keys[KEYS_ITEM_UNPUB], keys[KEYS_ITEM_ORDERS], user, oid, ts };
        if (rp_fcall(b, r->restore.name, 5, 3, argv, NULL) < 0)
            break;
    }
    rp_durable(b);
    (void)rlink_run(&r->link, b);
    held = !rp_replicas_short(b);
    for (i = 0; i < sent; i++) {
        const redisReply *rep = rp_reply(b, (int)i);
        if (!held) {
            backlog_add(r, &jobs[i]); /* (retried next turn, as a lost reply) */
        } else if (rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 1) {
            PM_INC(restored);
            given[i] = true;
        } else if (rep && rep->type == REDIS_REPLY_INTEGER) {
            PM_INC(restore_kept);
        } else {
            /* Not sent, its reply lost (seckill_restore is idempotent: one
             * that ran finds nothing to give back when sent again), the
             * function missing, or an error reply: try again next turn. */
            PM_INC(redis_errors);
            backlog_add(r, &jobs[i]);
        }
    }
    if (b->missing && !r->link.down)
        functions_lost(r, &r->restore);
    back_to_reserve(r, jobs, given, sent);
    if (given_out)
        memcpy(given_out, given, sent * sizeof(*given_out));
    jobs += sent;
    n -= sent;
later:
    for (i = 0; i < n; i++)
        backlog_add(r, &jobs[i]);
}

static void backlog_retry(struct rsv *r)
{
    struct restore_job *list = r->backlog, *next;
    struct restore_job batch[64];
    size_t n = 0;
    if (!list || !rlink_ok(&r->link))
        return;
    r->backlog = NULL;
    for (; list; list = next) {
        next = list->next;
        batch[n++] = *list;
        free(list);
        if (n == ARRAY_SIZE(batch)) {
            restore_many(r, batch, n, NULL);
            n = 0;
        }
    }
    restore_many(r, batch, n, NULL);
}

/* --- publishing --------------------------------------------------------- */

/* Poll thread: hand the report to the reserving thread, nothing more. */
static void on_delivery(struct pub_ticket *t, rd_kafka_resp_err_t err, rd_kafka_msg_status_t status)
{
    struct rsv_req *q = (struct rsv_req *)t;
    struct rsv *r = q->owner;
    q->dr_err = err;
    q->dr_status = status;
    fifo_hand_over(&r->reports, &r->t.mu, &r->t.cv, q, q, 1);
}

static struct restore_job job_of(const struct rsv_req *q)
{
    struct restore_job j = { q->user_id, q->item_id, q->order_id, q->reserved_at_ms, q->salt, NULL };
    return j;
}

static void mark_add(struct rsv *r, struct rsv_req *q, enum rsv_outcome o);

/* Answer a buy Kafka refused for certain, once its give-back ran: a unit
 * given back is "unavailable" (nothing was kept), but one a sweeper claimed
 * first, or one whose give-back waits in the backlog, may still be published
 * and become an order: its buyer hears "unknown", with the order id to ask,
 * and the order is indexed for that question (with the next marks_flush). */
static void answer_refused(struct rsv *r, struct rsv_req *q, bool given)
{
    if (given) {
        finish(q, RSV_UNAVAILABLE);
        return;
    }
    PM_INC(refused_unknown);
    mark_add(r, q, RSV_UNKNOWN);
}

/* Hand a reserved order to Kafka. One the local queue refuses is given back
 * at once: it never left the process, so only a sweeper's claim can make it
 * an order (answer_refused). The caller flushes the marks. */
static void publish(struct rsv *r, struct batch_entry *e)
{
    struct rsv_req *q = e->req;
    struct restore_job j;
    bool given;
    rd_kafka_resp_err_t ke = pub_send(r->pub, q->user_id, e->msg, e->msg_len, &q->ticket);
    if (ke == RD_KAFKA_RESP_ERR_NO_ERROR)
        return;
    if (ke == RD_KAFKA_RESP_ERR__QUEUE_FULL)
        PM_INC(kafka_queue_full);
    else
        PM_INC(kafka_not_persisted);
    j = job_of(q);
    restore_many(r, &j, 1, &given);
    answer_refused(r, q, given);
}

/* Reconnecting while a batch's outcome is unknown: its buyers are held
 * waiting, and the whole attempt is bounded by redis.command_timeout_ms, so
 * it tries often (20 ms, at most 200 ms apart) rather than politely. */
#define AMBIGUOUS_RETRY_BASE_MS 20
#define AMBIGUOUS_RETRY_CAP_MS 200

/* The replies of these scripts were lost (a connection broke after they
 * were sent): each of them may or may not have run. Ask Redis, once it
 * answers again within the command timeout, for each reservation: publish
 * those that exist (as Redis holds them), refuse the rest (nothing was kept).
 * If Redis stays away, their outcome is unknown: a reservation that did
 * happen is published by the sweeper later (counted as ambiguous), one that
 * did not is nothing. */
static void resolve_ambiguous(struct rsv *r, struct batch_entry **amb, size_t n)
{
    struct rp_batch *b = &r->asking;
    struct batch_entry *ok[RSV_BATCH];
    size_t nok = 0, i, sent = 0;
    int64_t end = util_mono_ms() + r->cfg->redis.command_timeout_ms;
    int attempt = 0;
    /* With redis.min_replicas_ack, only WAIT on the connection that wrote a
     * reservation can confirm the replicas hold it, and that connection is
     * gone: refuse them all, the sweeper publishes those that exist. */
    if (!r->link.rp || rp_durability(r->link.rp) > 0)
        goto refuse;
    rlink_retry_now(&r->link);
    while (!rlink_ok(&r->link) && util_mono_ms() < end) {
        util_sleep_ms(util_backoff_ms(attempt++, AMBIGUOUS_RETRY_BASE_MS, AMBIGUOUS_RETRY_CAP_MS));
        rlink_retry_now(&r->link);
    }
    if (r->link.down)
        goto refuse;
    rp_batch_reset(b);
    for (; sent < n; sent++)
        if (rp_addf(b, amb[sent]->keys[KEYS_ITEM_PENDING], "HGET %s %s", amb[sent]->keys[KEYS_ITEM_PENDING],
                    amb[sent]->oid) < 0)
            break;
    (void)rlink_run(&r->link, b);
    for (i = 0; i < sent; i++) {
        const redisReply *rep = rp_reply(b, (int)i);
        struct batch_entry *e = amb[i];
        struct order o;
        char err[64];
        if (!rep)
            continue; /* lost again, or not sent: unknown */
        /* Publish the message Redis holds: the script may have re-stamped it. */
        if (rep->type == REDIS_REPLY_STRING && rep->len <= sizeof(e->msg) &&
            order_decode(rep->str, rep->len, &o, err, sizeof(err)) == 0 && o.order_id == e->req->order_id) {
            memcpy(e->msg, rep->str, rep->len);
            e->msg_len = rep->len;
            e->req->reserved_at_ms = o.reserved_at_ms;
            ok[nok++] = e;
        } else {
            finish(e->req, RSV_UNAVAILABLE);
            e->req = NULL;
        }
    }
    for (i = 0; i < nok; i++) {
        PM_INC(reserved);
        publish(r, ok[i]);
        ok[i]->req = NULL;
    }
refuse:
    for (i = 0; i < n; i++)
        if (amb[i]->req) {
            PM_INC(ambiguous);
            finish(amb[i]->req, RSV_UNKNOWN);
            amb[i]->req = NULL;
        }
}

static int entry_fill(struct rsv *r, struct batch_entry *e, struct rsv_req *q)
{
    struct order o;
    int len;
    e->req = q;
    q->order_id = oid_next(r->gen);
    if (q->order_id < 0) {
        log_repeat(&r->say_no_ids, LOG_LVL_ERROR, "order ids: the block is used up",
                   "order ids: the block is used up and the next one has not arrived; orders are refused "
                   "(503) until it does");
        return -1;
    }
    log_repeat_end(&r->say_no_ids, "the next block arrived");
    q->reserved_at_ms = util_wall_ms();
    o = (struct order){ q->order_id, q->user_id, q->item_id, 1, q->reserved_at_ms };
    /* Signed before it is stored: the sweeper re-publishes these bytes and
     * holds no key. */
    if (osig_sign(&o) != 0)
        return -1;
    len = order_encode(&o, e->msg, sizeof(e->msg));
    /* In the buyer's bucket when the item has buckets (bucket.h). */
    q->salt = bkmap_salt(r->bk, q->item_id, q->user_id);
    q->tries++;
    if (len < 0 || keys_item_all_at(e->keys, r->cfg->redis.key_prefix, q->item_id, q->salt) != 0)
        return -1;
    e->msg_len = (size_t)len;
    snprintf(e->user, sizeof(e->user), "%" PRId64, q->user_id);
    snprintf(e->oid, sizeof(e->oid), "%" PRId64, q->order_id);
    snprintf(e->ts, sizeof(e->ts), "%" PRId64, q->reserved_at_ms);
    if (!q->admitted)
        return 0;
    if (keys_queue(e->adm_keys[0], KEYS_MAX, r->cfg->redis.key_prefix, q->item_id, KEYS_QUEUE_ADM) < 0 ||
        keys_queue(e->adm_keys[1], KEYS_MAX, r->cfg->redis.key_prefix, q->item_id, KEYS_QUEUE_USED) < 0)
        return -1;
    snprintf(e->adm_starts, sizeof(e->adm_starts), "%" PRId64, q->adm.starts_ms);
    snprintf(e->adm_expires, sizeof(e->adm_expires), "%" PRId64, q->adm.expires_ms);
    snprintf(e->adm_nonce, sizeof(e->adm_nonce), "%" PRId64, q->adm.nonce);
    return 0;
}

/* Re-encode an entry's order message after the script re-stamped it. */
static int entry_restamp(struct batch_entry *e, int64_t at)
{
    struct rsv_req *q = e->req;
    struct order o = { q->order_id, q->user_id, q->item_id, 1, at };
    /* The MAC does not cover reserved_at_ms (ordersig.h), so signing again
     * gives the same sig; it only has to be in the message. */
    int len = osig_sign(&o) == 0 ? order_encode(&o, e->msg, sizeof(e->msg)) : -1;
    if (len < 0)
        return -1;
    q->reserved_at_ms = at;
    e->msg_len = (size_t)len;
    snprintf(e->ts, sizeof(e->ts), "%" PRId64, at);
    return 0;
}

/* Decide one request from seckill_reserve's reply: an integer code, or
 * {code, ms}: a sale not yet open with its opening, or a reservation the
 * script re-stamped with its time. A reserved one joins won[]. A reply the
 * table does not know is said once while it repeats (say). */
static void script_result(struct batch_entry *e, const redisReply *rep, struct log_repeat *say,
                          struct batch_entry **won, size_t *nwon)
{
    const redisReply *c = rep;
    int64_t ms = 0;
    enum rsv_outcome o = RSV_UNAVAILABLE;
    bool known;
    if (rep->type == REDIS_REPLY_ARRAY) {
        c = rep->elements == 2 ? rep->element[0] : NULL;
        if (c && (rep->element[1]->type != REDIS_REPLY_STRING ||
                  util_parse_i64(rep->element[1]->str, 1, INT64_MAX, &ms) != 0))
            c = NULL;
    }
    known = c && c->type == REDIS_REPLY_INTEGER && rsv_outcome_of_code(c->integer, &o);
    /* {code, ms} comes with these two alone, and a sale not yet open always
     * says when it opens: any other shape is a reply the table does not know. */
    if (known && rep->type == REDIS_REPLY_ARRAY && o != RSV_NOT_STARTED && o != RSV_ACCEPTED)
        known = false;
    if (known && o == RSV_NOT_STARTED && rep->type != REDIS_REPLY_ARRAY)
        known = false;
    if (known && o == RSV_ACCEPTED && ms && entry_restamp(e, ms) != 0) {
        /* Cannot happen (the message only grows by digits it had room for);
         * the reservation stands in Redis and the sweeper publishes it. */
        log_error("order %" PRId64 ": cannot re-encode it; left to the sweeper", e->req->order_id);
        finish(e->req, RSV_UNKNOWN);
        return;
    }
    if (!known) {
        char key[LOG_REPEAT_KEY_MAX];
        PM_INC(script_unknown_code);
        snprintf(key, sizeof(key), "redis: reserve: a reply the outcome table does not know (%s %lld)",
                 rep->type == REDIS_REPLY_ARRAY ? "array" : "integer",
                 c && c->type == REDIS_REPLY_INTEGER ? c->integer : 0LL);
        log_repeat(say, LOG_LVL_ERROR, key, "%s; answered 503 (said once while it lasts)", key);
        finish(e->req, RSV_UNAVAILABLE);
        return;
    }
    log_repeat_end(say, "a known reply");
    if (o == RSV_ACCEPTED) {
        PM_INC(reserved);
        won[(*nwon)++] = e;
        return;
    }
    e->req->starts_at_ms = ms;
    finish(e->req, o);
}

/* Copy the requests into entries (the messages and keys the script needs);
 * one that does not fit is answered at once. The number of entries filled. */
static size_t entries_fill(struct rsv *r, struct rsv_req **reqs, size_t n)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (entry_fill(r, &r->entries[m], reqs[i]) != 0) {
            finish(reqs[i], RSV_UNAVAILABLE);
            continue;
        }
        m++;
    }
    return m;
}

/* Add one seckill_reserve call per entry to the batch, each routed by its
 * item's keys; those that could not be added are answered. The batch is
 * durable (rpipe.h): with redis.min_replicas_ack, WAIT follows the calls on
 * every shard they reached. The number added (the first ones: command i is
 * entry i). */
static size_t scripts_add(struct rsv *r, size_t m)
{
    struct rp_batch *b = &r->calls;
    size_t sent = 0;
    rp_batch_reset(b);
    for (size_t i = 0; i < m; i++) {
        struct batch_entry *e = &r->entries[i];
        /* the keys in enum order, as seckill_reserve names them (an admitted
         * buy's function two more), then its args (an admitted buy's three
         * more) */
        const char *argv[KEYS_ITEM_PARTS + 2 + 7];
        size_t argl[KEYS_ITEM_PARTS + 2 + 7];
        int nk = 0, na = 0;
        for (; nk < KEYS_ITEM_PARTS; nk++)
            argv[nk] = e->keys[nk];
        if (e->req->admitted) {
            argv[nk++] = e->adm_keys[0];
            argv[nk++] = e->adm_keys[1];
        }
        argv[nk + na++] = e->user;
        argv[nk + na++] = e->oid;
        argv[nk + na++] = e->msg;
        argv[nk + na++] = e->ts;
        if (e->req->admitted) {
            argv[nk + na++] = e->adm_starts;
            argv[nk + na++] = e->adm_expires;
            argv[nk + na++] = e->adm_nonce;
        }
        for (int k = 0; k < nk + na; k++)
            argl[k] = strlen(argv[k]);
        argl[nk + 2] = e->msg_len;
        const char *fn = e->req->admitted ? r->reserve_admitted.name : r->reserve.name;
        if (rp_fcall(b, fn, nk, na, argv, argl) < 0)
            break;
        sent++;
    }
    for (size_t i = sent; i < m; i++)
        finish(r->entries[i].req, RSV_UNAVAILABLE);
    /* In the same round trip: WAIT answers once the replicas hold every
     * write its connection made, the batch's reservations included. */
    rp_durable(b);
    return sent;
}

/* One script's reply, other than a reservation or a refusal: answered 503
 * (*missing: Redis lacked the function; *readonly: it is a replica now). */
static void script_failed(struct batch_entry *e, const redisReply *rep, int *missing, int *readonly)
{
    enum rp_reply_kind kind = rp_classify(rep);
    if (kind == RP_REPLY_NO_FUNCTION) {
        /* Nothing ran. No retry: the producer cannot load it, and every
         * call fails alike until an operator does. */
        *missing = 1;
    } else {
        /* An error reply (out of memory, a read-only replica): the script
         * did not run. */
        *readonly |= kind == RP_REPLY_READONLY;
        PM_INC(redis_errors);
        log_debug("redis: reserve: %s", rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
    }
    finish(e->req, RSV_UNAVAILABLE);
}

/* --- buckets ------------------------------------------------------------ */

/* q to be sent again, if it has tries left; 503 when it has not. */
static void try_again(struct rsv *r, struct rsv_req *q)
{
    if (q->tries >= RSV_TRIES) {
        PM_INC(bucket_dry_busy);
        finish(q, RSV_UNAVAILABLE);
        return;
    }
    r->again[r->nagain++] = q;
}

/* A reply that is no answer yet: the item's own slot refused the buy for
 * the item's buckets (learnt again, sent again), or the buyer's bucket is
 * dry (into dry[], for dry_settle). False for any other reply. */
static bool bucket_reply(struct rsv *r, struct batch_entry *e, const redisReply *rep, struct rsv_req **dry,
                         size_t *ndry)
{
    if (rep->type != REDIS_REPLY_INTEGER)
        return false;
    if (rep->integer == RSV_CODE_BUCKETED) {
        PM_INC(bucket_relearned);
        bkmap_forget(r->bk, e->req->item_id);
        try_again(r, e->req);
        return true;
    }
    if (rep->integer == outcomes[RSV_SOLD_OUT].code && e->req->salt != BUCKET_HOME) {
        dry[(*ndry)++] = e->req;
        return true;
    }
    return false;
}

/* One transfer (xfer.h) under a new id. 0 and *moved, or -1: it may be
 * left half done, and this thread finishes it when Redis answers
 * (unfinished_retry). */
static int move(struct rsv *r, struct xfer *x, int64_t *moved)
{
    char err[256];
    *moved = 0;
    if (xfer_new_id(x->id) != 0 || !r->link.rp)
        return -1;
    if (xfer_move(r->link.rp, r->cfg->redis.key_prefix, x, moved, err, sizeof(err)) == 0) {
        PM_ADD(xfer_units, *moved);
        return 0;
    }
    PM_INC(xfer_failed);
    log_warn("item %" PRId64 ": a transfer from %s to %s left half done (%s); finished when Redis answers",
             x->item, x->from == BUCKET_HOME ? "the reserve" : "a bucket",
             x->to == BUCKET_HOME ? "the reserve" : "a bucket", err);
    if (r->nunfinished < UNFINISHED_MAX) {
        r->unfinished[r->nunfinished].item = x->item;
        r->unfinished[r->nunfinished++].from = x->from;
    } else {
        log_error("item %" PRId64 ": too many refills left half done to keep; `seckillctl reconcile` "
                  "counts their units in flight", x->item);
    }
    return -1;
}

/* The fullest of the item's buckets other than `to`, by one GET each in one
 * round trip: 0 with *from and *units (0 units: every one is empty), or -1. */
static int fullest(struct rsv *r, int64_t item, int k, const int salts[], int to, int *from,
                   int64_t *units)
{
    struct rp_batch *b = &r->stocks;
    char key[KEYS_MAX];
    int at[BUCKET_MAX], n = 0;
    *units = 0;
    rp_batch_reset(b);
    for (int i = 0; i < k; i++) {
        if (salts[i] == to)
            continue;
        if (keys_item_at(key, sizeof(key), r->cfg->redis.key_prefix, item, salts[i], KEYS_ITEM_STOCK) < 0 ||
            rp_addf(b, key, "GET %s", key) < 0)
            return -1;
        at[n++] = salts[i];
    }
    if (rlink_run(&r->link, b) != 0)
        return -1;
    for (int i = 0; i < n; i++) {
        const redisReply *rep = rp_reply(b, i);
        int64_t v = 0;
        bool text = rep && rep->type == REDIS_REPLY_STRING;
        if (!rep || (text && util_parse_i64(rep->str, INT64_MIN, INT64_MAX, &v) != 0) ||
            (!text && rep->type != REDIS_REPLY_NIL))
            return -1; /* (nil: a bucket not loaded, no units) */
        if (v > *units) {
            *units = v;
            *from = at[i];
        }
    }
    return 0;
}

/* Units for item's dry bucket `to`: up to REFILL_UNITS from the reserve or,
 * once it is empty, half of the fullest other bucket's (the escrow rule:
 * each source gives only what it holds, docs/design.md). The units moved;
 * 0 when the reserve and every other bucket hold none; -1 when Redis did
 * not answer or the others kept selling what it tried to take. */
static int64_t refill(struct rsv *r, int64_t item, int to)
{
    struct xfer x = { .item = item, .from = BUCKET_HOME, .to = to, .want = REFILL_UNITS, .keep = 0 };
    int k, salts[BUCKET_MAX];
    int64_t moved, most, now = util_mono_ms(), key[2] = { item, to };
    struct refill_size *last = i64map_put(&r->refills, key);
    if (last && last->units > 0 && now - last->at_ms < REFILL_FAST_MS)
        x.want = last->units * 2 < REFILL_MAX ? last->units * 2 : REFILL_MAX;
    if (!bkmap_get(r->bk, item, &k, salts) || move(r, &x, &moved) != 0)
        return -1;
    if (moved > 0) {
        PM_INC(xfer_reserve);
        if (last) /* (still valid: nothing was added to the table since) */
            *last = (struct refill_size){ .units = x.want, .at_ms = now };
        return moved;
    }
    for (int attempt = 0; attempt < 3; attempt++) {
        if (fullest(r, item, k, salts, to, &x.from, &most) != 0)
            return -1;
        if (most == 0)
            return 0;
        x.want = (most + 1) / 2;
        if (move(r, &x, &moved) != 0)
            return -1;
        if (moved > 0) {
            PM_INC(xfer_bucket);
            return moved;
        }
    }
    return -1;
}

/* The buys whose bucket answered sold out: each bucket refilled once per
 * call and its buys tried again; when no slot of the item holds a unit,
 * 410, and the item is taken as dry for producer.soldout_refresh_ms (its
 * buckets' sold-out answers stand without a refill meanwhile: the
 * staleness a sold-out mark has). A transfer whose receiving half is
 * missing (a producer that died between the halves) is not counted here:
 * its units are finished into their bucket by `seckillctl reconcile`. */
static void dry_settle(struct rsv *r, struct rsv_req **dry, size_t n)
{
    struct {
        int64_t item, got;
        int salt;
    } seen[RSV_BATCH];
    size_t nseen = 0;
    int64_t now = util_mono_ms(), *until;
    for (size_t i = 0; i < n; i++) {
        struct rsv_req *q = dry[i];
        int64_t got = -2;
        if ((until = i64map_get(&r->dry, &q->item_id)) && *until > now) {
            finish(q, RSV_SOLD_OUT);
            continue;
        }
        for (size_t j = 0; j < nseen && got == -2; j++)
            if (seen[j].item == q->item_id && seen[j].salt == q->salt)
                got = seen[j].got;
        if (got == -2) {
            got = refill(r, q->item_id, q->salt);
            seen[nseen].item = q->item_id;
            seen[nseen].salt = q->salt;
            seen[nseen++].got = got;
            if (got == 0 && (until = i64map_put(&r->dry, &q->item_id)))
                *until = now + CFG_GET(r->cfg->producer.soldout_refresh_ms);
        }
        if (got > 0) {
            PM_INC(bucket_retries);
            try_again(r, q);
        } else {
            finish(q, got == 0 ? RSV_SOLD_OUT : RSV_UNAVAILABLE);
        }
    }
}

/* Finish the refills this thread left half done, each from its source's
 * records (xfer_finish), once Redis answers. */
static void unfinished_retry(struct rsv *r)
{
    size_t kept = 0;
    for (size_t i = 0; i < r->nunfinished; i++) {
        struct xfer_tally t;
        char err[256];
        if (rlink_ok(&r->link) && xfer_finish(r->link.rp, r->cfg->redis.key_prefix, r->unfinished[i].item,
                                              r->unfinished[i].from, true, &t, err, sizeof(err)) == 0) {
            log_info("item %" PRId64 ": %" PRId64 " refill(s) finished", r->unfinished[i].item, t.finished);
            continue;
        }
        r->unfinished[kept++] = r->unfinished[i];
    }
    r->nunfinished = kept;
}

/* Read the replies of the batch's calls: the reserved entries go to won[],
 * the buys of a dry bucket to dry[], the rest are answered (*missing,
 * *readonly: see script_failed). A call that was not sent did not run: 503.
 * One whose reply was lost may have run: resolved (resolve_ambiguous). */
static void scripts_read(struct rsv *r, size_t sent, struct batch_entry **won, size_t *nwon,
                         struct rsv_req **dry, size_t *ndry, int *missing, int *readonly)
{
    const struct rp_batch *b = &r->calls;
    struct batch_entry *amb[RSV_BATCH];
    size_t namb = 0;
    for (size_t i = 0; i < sent; i++) {
        struct batch_entry *e = &r->entries[i];
        const redisReply *rep = rp_reply(b, (int)i);
        if (rp_status(b, (int)i) == RP_UNKNOWN) {
            amb[namb++] = e;
        } else if (!rep) {
            finish(e->req, RSV_UNAVAILABLE);
        } else if (rep->type == REDIS_REPLY_INTEGER || rep->type == REDIS_REPLY_ARRAY) {
            rlink_worked(&r->link);
            if (!bucket_reply(r, e, rep, dry, ndry))
                script_result(e, rep, &r->say_unknown_code, won, nwon);
        } else {
            script_failed(e, rep, missing, readonly);
        }
    }
    if (namb)
        resolve_ambiguous(r, amb, namb);
}

static void mark_add(struct rsv *r, struct rsv_req *q, enum rsv_outcome o);
static void marks_flush(struct rsv *r);

static void dry_settle(struct rsv *r, struct rsv_req **dry, size_t n);

/* Run n reservation calls in one round trip (per shard on a Cluster); the
 * buys whose bucket was refilled meanwhile, once more. */
static void reserve_batch(struct rsv *r, struct rsv_req **reqs, size_t n)
{
    struct batch_entry *won[RSV_BATCH];
    struct rsv_req *dry[RSV_BATCH], *again[RSV_BATCH];
    int64_t items[RSV_BATCH];
    size_t nwon = 0, ndry = 0, sent;
    int missing = 0, readonly = 0, held;

    if (!rlink_ok(&r->link)) {
        for (size_t i = 0; i < n; i++)
            finish(reqs[i], RSV_UNAVAILABLE);
        return;
    }
    /* Which slot each buy goes to (a round trip only for items not known
     * within the last BKMAP_TTL_MS; unknown ones go to the item's own slot,
     * which sends a bucketed item's buys back). */
    for (size_t i = 0; i < n; i++)
        items[i] = reqs[i]->item_id;
    (void)bkmap_learn(r->bk, r->link.rp, r->cfg->redis.key_prefix, items, n);
    /* Entries are reused by a retry: copy out the requests first. */
    sent = scripts_add(r, entries_fill(r, reqs, n));
    (void)rlink_run(&r->link, &r->calls);
    /* Every shard the batch reached confirmed (a WAIT not answered, or a
     * reply lost on any shard, confirms nothing: acked is then -1). */
    held = !rp_replicas_short(&r->calls);
    if (!held && r->calls.acked >= 0)
        log_debug("redis: WAIT: %d of %d replicas", r->calls.acked, r->calls.wait_replicas);
    scripts_read(r, sent, won, &nwon, dry, &ndry, &missing, &readonly);
    /* Publish before retrying: the retry reuses the entries. A reservation
     * the replicas may not hold is not promised: a failover now could sell
     * its unit again. It stays in Redis and the sweeper publishes it: its
     * buyer hears "unknown", with the order id to ask. */
    for (size_t i = 0; i < nwon; i++) {
        if (held) {
            publish(r, won[i]);
        } else {
            PM_INC(replica_ack_short);
            mark_add(r, won[i]->req, RSV_UNKNOWN);
        }
    }
    marks_flush(r);
    if (missing && !r->link.down)
        functions_lost(r, &r->reserve);
    else if (readonly && !r->link.down) /* (the primary moved: the next connect finds the new one) */
        rlink_down(&r->link, "READONLY: the server is a replica now");
    dry_settle(r, dry, ndry);
    if (r->nagain == 0)
        return;
    /* (again[] is filled anew by the next call: copy it out) */
    n = r->nagain;
    memcpy(again, r->again, n * sizeof(again[0]));
    r->nagain = 0;
    reserve_batch(r, again, n);
}

static int mark_cmp(const void *a, const void *b)
{
    const struct mark *x = a, *y = b;
    if (x->item_id != y->item_id)
        return (x->item_id > y->item_id) - (x->item_id < y->item_id);
    return (x->salt > y->salt) - (x->salt < y->salt);
}

/* Mark the collected accepted orders published (one ZREM per item's slot with all
 * their order ids; an unknown one stays unpublished, for the sweeper) and
 * index every collected order id to its item (orderidx.h: one HSET and one
 * PEXPIRE per bucket of ids), all in one round trip; then answer them. The
 * index goes first so that a buyer who polls the moment the 202 arrives
 * finds the order. Best effort: a mark that does not arrive only means one
 * harmless re-publish by the sweeper; an index that does not arrive means
 * /orders/ID answers 404 while /seckill/ITEM still works. */
static void marks_flush(struct rsv *r)
{
    const char *argv[RSV_BATCH + 2];
    char key[KEYS_MAX];
    struct oidx_entry idx[RSV_BATCH];
    struct rp_batch *b = &r->marking;
    size_t i = 0, n = r->nmarks;
    r->nmarks = 0;
    if (n == 0)
        return;
    if (!rlink_ok(&r->link))
        goto answer;
    rp_batch_reset(b);
    qsort(r->marks, n, sizeof(r->marks[0]), mark_cmp);
    while (i < n) {
        size_t j = i, argc = 2;
        const struct mark *first = &r->marks[i];
        keys_item_at(key, KEYS_MAX, r->cfg->redis.key_prefix, first->item_id, first->salt, KEYS_ITEM_UNPUB);
        argv[0] = "ZREM";
        argv[1] = key;
        for (; j < n && r->marks[j].item_id == first->item_id && r->marks[j].salt == first->salt; j++)
            if (r->marks[j].outcome == RSV_ACCEPTED)
                argv[argc++] = r->marks[j].oid;
        i = j;
        if (argc == 2)
            continue; /* none of the item's was published */
        if (rp_add(b, key, (int)argc, argv, NULL) < 0)
            break;
    }
    for (i = 0; i < n; i++) {
        const struct rsv_req *q = r->marks[i].req;
        idx[i] = (struct oidx_entry){ q->order_id, q->item_id, q->user_id };
    }
    (void)oidx_add(b, r->cfg->redis.key_prefix, CFG_GET(r->cfg->producer.status_ttl_s), idx, n);
    /* (the replies do not matter: see above) */
    (void)rlink_run(&r->link, b);
answer:
    for (i = 0; i < n; i++)
        finish(r->marks[i].req, r->marks[i].outcome);
}

/* Index q's order, and answer it o, with the next flush. */
static void mark_add(struct rsv *r, struct rsv_req *q, enum rsv_outcome o)
{
    struct mark *m = &r->marks[r->nmarks++];
    m->item_id = q->item_id;
    m->salt = q->salt;
    m->req = q;
    m->outcome = o;
    snprintf(m->oid, sizeof(m->oid), "%" PRId64, q->order_id);
    if (r->nmarks == RSV_BATCH)
        marks_flush(r);
}

/* Give back the units of n buys Kafka refused for certain, and answer them. */
static void refused_settle(struct rsv *r, const struct restore_job *jobs, struct rsv_req **failed, size_t n)
{
    bool given[RSV_BATCH];
    restore_many(r, jobs, n, given);
    for (size_t i = 0; i < n; i++)
        answer_refused(r, failed[i], given[i]);
}

/* Delivery reports: accepted orders are marked published (so the sweeper
 * leaves them alone) and answered; certain failures give the unit back;
 * possible ones keep it for the sweeper, since it may already be in Kafka. */
static void handle_reports(struct rsv *r, struct rsv_req *list)
{
    struct restore_job jobs[RSV_BATCH];
    struct rsv_req *failed[RSV_BATCH];
    size_t nj = 0;
    while (list) {
        struct rsv_req *q = list;
        list = q->next;
        if (q->dr_err == RD_KAFKA_RESP_ERR_NO_ERROR) {
            mark_add(r, q, RSV_ACCEPTED);
            continue;
        }
        if (q->dr_status == RD_KAFKA_MSG_STATUS_NOT_PERSISTED) {
            PM_INC(kafka_not_persisted);
            jobs[nj] = job_of(q);
            failed[nj++] = q;
        } else {
            /* Kafka may hold it: the unit stays reserved and the sweeper
             * publishes it again; the buyer hears "unknown" with the id. */
            PM_INC(kafka_possibly_persisted);
            log_debug("kafka: order %" PRId64 " possibly persisted (%s): kept for the sweeper",
                      q->order_id, rd_kafka_err2name((rd_kafka_resp_err_t)q->dr_err));
            mark_add(r, q, RSV_UNKNOWN);
        }
        if (nj == RSV_BATCH) {
            refused_settle(r, jobs, failed, nj);
            nj = 0;
        }
    }
    refused_settle(r, jobs, failed, nj);
    marks_flush(r);
}

/* --- the thread --------------------------------------------------------- */

static void *rsv_main(void *arg)
{
    struct rsv *r = arg;
    daemon_signals_block_thread();
    for (;;) {
        struct rsv_req *in, *dr;
        int stop;
        pthread_mutex_lock(&r->t.mu);
        if (fifo_empty(&r->in) && fifo_empty(&r->reports))
            bgt_wait_ms(&r->t, 100); /* wake for the backlog now and then */
        in = fifo_take_all(&r->in, NULL);
        dr = fifo_take_all(&r->reports, NULL);
        stop = bgt_stopping(&r->t);
        pthread_mutex_unlock(&r->t.mu);

        if (dr)
            handle_reports(r, dr);
        while (in) {
            struct rsv_req *batch[RSV_BATCH];
            size_t n = 0;
            while (in && n < RSV_BATCH) {
                batch[n++] = in;
                in = in->next;
            }
            reserve_batch(r, batch, n);
        }
        backlog_retry(r);
        unfinished_retry(r);
        if (stop && !dr && !in)
            break;
    }
    return NULL;
}

int rsv_start(const struct cfg *c, struct pub *p, struct oid_gen *gen, struct rsv **out,
              char *err, size_t errlen)
{
    struct rsv *r = calloc(1, sizeof(*r));
    int ret = -1, st;
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    r->cfg = c;
    r->pub = p;
    r->gen = gen;
    r->reserve = (struct rfunc)RFUNC_INIT("seckill_reserve", &funclib_producer);
    r->restore = (struct rfunc)RFUNC_INIT("seckill_restore", &funclib_producer);
    r->reserve_admitted = (struct rfunc)RFUNC_INIT("seckill_reserve_admitted", &funclib_producer);
    if (!(r->bk = bkmap_new())) {
        snprintf(err, errlen, "out of memory");
        free(r);
        return -1;
    }
    i64map_init(&r->dry, 1, sizeof(int64_t));
    i64map_init(&r->refills, 2, sizeof(struct refill_size));
    r->link = (struct rlink){
        .cfg = c, .what = "orders", .prepare = check_functions, .arg = r, .report_up = 1, .count_trips = 1
    };
    /* Missing functions: no start (RFUNC_MISSING), unlike a Redis that is down. */
    if ((st = rlink_open(&r->link, err, errlen)) != RFUNC_OK) {
        ret = st == RFUNC_MISSING ? RFUNC_MISSING : -1;
        goto fail;
    }
    fifo_init(&r->in, FIFO_LINK(struct rsv_req, next));
    fifo_init(&r->reports, FIFO_LINK(struct rsv_req, next));
    if (bgt_start(&r->t, rsv_main, r) != 0) {
        snprintf(err, errlen, "cannot start the reserving thread");
        goto fail;
    }
    *out = r;
    return 0;
fail:
    rlink_close(&r->link);
    bkmap_free(r->bk);
    i64map_free(&r->dry);
    i64map_free(&r->refills);
    free(r);
    return ret;
}

void rsv_submit(struct rsv *r, struct rsv_req *req)
{
    req->owner = r;
    req->ticket.done = on_delivery;
    fifo_hand_over(&r->in, &r->t.mu, &r->t.cv, req, req, 1);
}

void rsv_stop(struct rsv *r)
{
    struct restore_job *j, *next;
    if (!r)
        return;
    bgt_stop(&r->t);
    for (j = r->backlog; j; j = next) {
        next = j->next;
        log_warn("order %" PRId64 ": give-back not done before exit; the sweeper will publish it",
                 j->order_id);
        free(j);
    }
    rlink_close(&r->link);
    rp_batch_free(&r->calls);
    rp_batch_free(&r->marking);
    rp_batch_free(&r->giving);
    rp_batch_free(&r->asking);
    rp_batch_free(&r->stocks);
    bkmap_free(r->bk);
    i64map_free(&r->dry);
    i64map_free(&r->refills);
    free(r);
}
