#include "wroom.h"

#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admitter.h"
#include "bgthread.h"
#include "daemon.h"
#include "fifo.h"
#include "keys.h"
#include "log.h"
#include "pmetrics.h"
#include "rlink.h"
#include "rpipe.h"
#include "util.h"

/* Requests per pipelined round trip. */
#define WR_BATCH 256
/* seckill_queue's keys: the item's stock, buyers, pending and window, then
 * the room's first five (keys.h). */
#define WR_NKEYS 9

struct wr {
    const struct cfg *cfg;
    struct qcopy *copy; /* the lines asks are answered from without Redis (qcopy.h) */
    struct rlink link; /* this thread's Redis */
    struct rp_batch calls;
    struct bgthread t;
    struct fifo in; /* submitted, under t.mu */
    /* Said once while they last: replies the table does not know, tokens
     * that cannot be minted (no key: the producer loads one at start). */
    struct log_repeat say_unknown, say_mint;
};

static const struct {
    unsigned http;
    const char *word;
} states[] = {
#define WR_ROW(name, http, word) { http, word },
    WR_STATES(WR_ROW)
#undef WR_ROW
};

unsigned wr_http_status(enum wr_state s) { return states[s].http; }
const char *wr_word(enum wr_state s) { return states[s].word; }

int64_t wr_keep_place_ms(int64_t abandon_s) { return abandon_s * 1000 / 3; }

int64_t wr_poll_after_ms(int64_t position, int64_t eta_ms, int64_t until_start_ms, int64_t abandon_s,
                         int64_t jitter_ms, int64_t callable)
{
    int64_t most = wr_keep_place_ms(abandon_s), ms;
    if (position > 0 && callable >= 0 && position > callable)
        ms = most;
    else if (position <= 0 && until_start_ms > 0)
        ms = until_start_ms + ADT_TICK_MS + jitter_ms;
    else if (position <= 0)
        ms = WR_POLL_UNPLACED_MS;
    else if (eta_ms >= 0)
        ms = eta_ms / 4 * 3;
    else
        ms = WR_POLL_UNKNOWN_MS;
    if (ms > most)
        ms = most;
    return ms < WR_POLL_MIN_MS ? WR_POLL_MIN_MS : ms;
}

static void done(struct wr_req *q, enum wr_state s)
{
    q->state = s;
    if (s == WR_ADMITTED)
        PM_INC(queue_told_admitted);
    else if (s == WR_SOLD_OUT)
        PM_INC(queue_told_sold_out);
    q->complete(q);
}

/* A reply's element as an integer: an integer reply, or a string holding
 * one (Redis's numbers that came back as strings: scores, hash values).
 * 0, or -1. */
static int int_of(const redisReply *r, int64_t *v)
{
    if (r->type == REDIS_REPLY_INTEGER) {
        *v = r->integer;
        return 0;
    }
    if (r->type == REDIS_REPLY_STRING)
        return util_parse_i64(r->str, INT64_MIN, INT64_MAX, v);
    return -1;
}

/* The array r's first n elements as integers into v. 0, or -1 (too short, or
 * not numbers). */
static int ints_of(const redisReply *r, int64_t *v, size_t n)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements < n)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (int_of(r->element[i], &v[i]) != 0)
            return -1;
    return 0;
}

/* An admitted buyer's token: {2, till, nonce, starts_ms, now_ms}. */
static enum wr_state admitted(struct wr *w, struct wr_req *q, const int64_t *v)
{
    struct adm_token t = { .item_id = q->item_id,
                           .user_id = q->user_id,
                           .starts_ms = v[3],
                           .minted_ms = v[4],
                           .expires_ms = v[1],
                           .nonce = v[2] };
    if (adm_mint(&t, q->admission, sizeof(q->admission)) != 0) {
        log_repeat(&w->say_mint, LOG_LVL_ERROR, "queue: cannot mint admission tokens",
                   "queue: cannot mint an admission token (producer.admission_keys); admitted buyers are "
                   "answered 503 (said once while it lasts)");
        return WR_UNAVAILABLE;
    }
    log_repeat_end(&w->say_mint, "a token minted");
    q->expires_ms = t.expires_ms;
    q->starts_ms = t.starts_ms;
    return WR_ADMITTED;
}

/* seckill_queue's reply (its answers: producer/lua/seckill_producer.lua)
 * into q's state; a reply the table does not know is 503, said once while
 * it lasts. */
static enum wr_state state_of(struct wr *w, struct wr_req *q, const redisReply *r)
{
    int64_t v[5], code;
    if (r->type == REDIS_REPLY_INTEGER) {
        switch (r->integer) {
        case -3: return WR_UNKNOWN_ITEM;
        case 0: return WR_NOT_QUEUED;
        case -5: return WR_ENDED;
        case -2: return WR_BOUGHT;
        case -1: return WR_SOLD_OUT;
        case 3: return WR_NONE;
        default: break;
        }
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2 && int_of(r->element[0], &code) == 0) {
        if (code == -10 && ints_of(r, v, 2) == 0) {
            q->opens_ms = v[1];
            return WR_NOT_OPEN;
        }
        if (code == 1 && ints_of(r, v, 4) == 0) {
            q->callable = -1;
            q->position = v[1];
            q->eta_ms = v[2];
            q->starts_ms = v[3];
            return WR_WAITING;
        }
        if (code == 2 && ints_of(r, v, 5) == 0)
            return admitted(w, q, v);
    }
    PM_INC(script_unknown_code);
    log_repeat(&w->say_unknown, LOG_LVL_ERROR, "redis: queue: a reply the table does not know",
               "redis: queue: a reply the table does not know (type %d); answered 503 (said once while it "
               "lasts)", r->type);
    return WR_UNAVAILABLE;
}

/* One seckill_queue call for q; -1 when it could not be added. */
static int add_call(struct wr *w, const struct wr_req *q)
{
    char ik[KEYS_ITEM_PARTS][KEYS_MAX], qk[KEYS_QUEUE_PARTS][KEYS_MAX], user[24];
    const char *prefix = w->cfg->redis.key_prefix;
    if (keys_item_all(ik, prefix, q->item_id) != 0 || keys_queue_all(qk, prefix, q->item_id) != 0)
        return -1;
    snprintf(user, sizeof(user), "%" PRId64, q->user_id);
    const char *argv[WR_NKEYS + 2] = { ik[KEYS_ITEM_STOCK], ik[KEYS_ITEM_BUYERS], ik[KEYS_ITEM_PENDING],
                                       ik[KEYS_ITEM_WINDOW], qk[KEYS_QUEUE_META], qk[KEYS_QUEUE_PRE],
                                       qk[KEYS_QUEUE_LINE], qk[KEYS_QUEUE_SEEN], qk[KEYS_QUEUE_ADM],
                                       user, q->join ? "1" : "0" };
    return rp_fcall(&w->calls, "seckill_queue", WR_NKEYS, 2, argv, NULL) < 0 ? -1 : 0;
}

static void answer_batch(struct wr *w, struct wr_req **in, size_t n)
{
    size_t sent = 0;
    if (!rlink_ok(&w->link))
        goto unavailable;
    rp_batch_reset(&w->calls);
    for (; sent < n; sent++)
        if (add_call(w, in[sent]) != 0)
            break;
    (void)rlink_run(&w->link, &w->calls);
    for (size_t i = 0; i < sent; i++) {
        const redisReply *r = rp_reply(&w->calls, (int)i);
        if (!r || r->type == REDIS_REPLY_ERROR) {
            if (r)
                PM_INC(redis_errors);
            /* A read and a place kept or taken: the buyer asks again. */
            done(in[i], WR_UNAVAILABLE);
            continue;
        }
        rlink_worked(&w->link);
        done(in[i], state_of(w, in[i], r));
    }
unavailable:
    for (size_t i = sent; i < n; i++)
        done(in[i], WR_UNAVAILABLE);
}

static void *wr_main(void *arg)
{
    struct wr *w = arg;
    daemon_signals_block_thread();
    for (;;) {
        struct wr_req *list;
        int stop;
        pthread_mutex_lock(&w->t.mu);
        while (fifo_empty(&w->in) && !bgt_stopping(&w->t))
            bgt_wait_ms(&w->t, -1);
        list = fifo_take_all(&w->in, NULL);
        stop = bgt_stopping(&w->t);
        pthread_mutex_unlock(&w->t.mu);
        while (list) {
            struct wr_req *batch[WR_BATCH];
            size_t n = 0;
            while (list && n < WR_BATCH) {
                batch[n++] = list;
                list = list->next;
            }
            answer_batch(w, batch, n);
        }
        if (stop)
            break;
    }
    return NULL;
}

int wr_answer_here(struct wr *w, struct wr_req *q)
{
    struct qc_answer a;
    if (!qc_ask(w->copy, q->item_id, q->user_id, util_mono_ms(), util_wall_ms(), &a))
        return 0;
    q->state = WR_WAITING;
    q->position = a.position;
    q->eta_ms = a.eta_ms;
    q->starts_ms = a.starts_ms;
    q->callable = a.callable;
    return 1;
}

int wr_start(const struct cfg *c, struct qcopy *v, struct wr **out, char *err, size_t errlen)
{
    struct wr *w = calloc(1, sizeof(*w));
    if (!w) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    w->cfg = c;
    w->copy = v;
    /* Redis may come later: calls are answered 503 until it does. */
    w->link = (struct rlink){ .cfg = c, .what = "queue calls", .count_trips = 1 };
    if (rlink_open(&w->link, err, errlen) != 0)
        err[0] = '\0'; /* rlink_ok() tries again at the first call */
    fifo_init(&w->in, FIFO_LINK(struct wr_req, next));
    if (bgt_start(&w->t, wr_main, w) != 0) {
        snprintf(err, errlen, "cannot start the waiting room's thread");
        rlink_close(&w->link);
        free(w);
        return -1;
    }
    *out = w;
    return 0;
}

void wr_submit(struct wr *w, struct wr_req *q)
{
    fifo_hand_over(&w->in, &w->t.mu, &w->t.cv, q, q, 1);
}

void wr_stop(struct wr *w)
{
    if (!w)
        return;
    bgt_stop(&w->t);
    rlink_close(&w->link);
    rp_batch_free(&w->calls);
    free(w);
}
