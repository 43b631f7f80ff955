/* wroom: the waiting room's two calls (issue #58), for an item created with
 * one (seckillctl item create --queue-opens-at):
 *
 *   POST /api/v1/queue/{item_id}   join: take a place (one per buyer: a
 *                                  second join, another tab, is the same place)
 *   GET  /api/v1/queue/{item_id}   ask where one stands
 *
 * Both answer the buyer's state (docs/api.md): waiting (a position and an
 * approximate ETA from the measured admission rate; no position before the
 * opening, where every place is equal), admitted (an admission token,
 * admtoken.h, and its end), sold out (no unit left and none pending: told
 * to every waiter at once, the place kept for a unit that comes back), or
 * why not (ended, holds a unit, not in the room, not open yet). Each is one
 * call of seckill_queue, the producer's function, which also records that
 * the buyer asked (a waiter who stops asking is passed over when their turn
 * comes: producer/admitter.h).
 *
 * Requests queue up from the HTTP thread; one thread answers all that are
 * queued in one pipelined round trip on a Redis connection of its own (so a
 * crowd polling its place never delays a reservation) and mints the tokens
 * of the admitted, then hands each back through its callback (status.h's
 * way). */
#ifndef SECKILL_WROOM_H
#define SECKILL_WROOM_H

#include <stdint.h>

#include "admtoken.h"
#include "cfg.h"
#include "qcopy.h"

/* Every answer, declared once: X(name, HTTP status, JSON word). The
 * buyer's states answer 200 {"state":WORD,...}; the others are the API's
 * refusals {"status":WORD}. */
#define WR_STATES(X)                                                                            \
    X(WAITING, 200, "waiting")        /* a place in the line (position, eta_s) */                \
    X(ADMITTED, 200, "admitted")      /* the token and its end */                                \
    X(SOLD_OUT, 200, "sold_out")      /* no unit left, none pending; the place is kept */        \
    X(BOUGHT, 200, "bought")          /* the buyer holds a unit of the item */                   \
    X(ENDED, 200, "ended")            /* the sale window closed */                               \
    X(NONE, 200, "none")              /* (asking) not in the room, or the place is gone */       \
    X(NOT_OPEN, 403, "not_open")      /* before queue_opens_at */                                \
    X(UNKNOWN_ITEM, 404, "unknown_item")                                                          \
    X(NOT_QUEUED, 404, "not_queued")  /* the item has no waiting room: buy it directly */        \
    X(UNAVAILABLE, 503, "unavailable") /* Redis could not answer, or no token could be minted */

enum wr_state {
#define WR_ENUM(name, http, word) WR_##name,
    WR_STATES(WR_ENUM)
#undef WR_ENUM
};

unsigned wr_http_status(enum wr_state s);
const char *wr_word(enum wr_state s);

struct wr_req {
    struct wr_req *next; /* queue link */
    /* in */
    int64_t item_id, user_id;
    int join;
    /* Called on the room's thread once the state is final; after it the
     * request belongs to the caller again. */
    void (*complete)(struct wr_req *q);
    /* out */
    enum wr_state state;
    int64_t position;   /* WR_WAITING: 1 is next; 0 before the opening (every place equal) */
    int64_t eta_ms;     /* WR_WAITING: -1 when no admission rate is known yet */
    int64_t starts_ms;  /* WR_WAITING, WR_ADMITTED: the sale's opening */
    int64_t callable;   /* WR_WAITING: places admission may still call; -1 not known */
    int64_t opens_ms;   /* WR_NOT_OPEN: when the room opens */
    int64_t expires_ms; /* WR_ADMITTED: the admission's end */
    char admission[ADM_TOKEN_MAX]; /* WR_ADMITTED */
};

struct wr;

/* Connect to Redis (or later: calls are answered 503 until it answers) and
 * start the thread; v is the producer's copy of the lines (qcopy.h), kept
 * by the admitter. 0, or -1 with err set. */
int wr_start(const struct cfg *c, struct qcopy *v, struct wr **out, char *err, size_t errlen);
/* Answer q here, on the caller's thread, when the copy can (a waiter of
 * the pre-queue whose turn has not come: qcopy.h): 1 with q's state set
 * (complete() is not called), or 0: submit it. */
int wr_answer_here(struct wr *w, struct wr_req *q);
/* Queue a request (any thread). Its complete() is called exactly once. */
void wr_submit(struct wr *w, struct wr_req *q);
/* Stop the thread once every submitted request has completed. */
void wr_stop(struct wr *w);

/* How soon a waiter should ask again, in milliseconds (the answers'
 * "poll_after_s", to the tenth of a second):
 *   - before the opening (position 0, every place equal): just after it
 *     (the admitter's next step), plus jitter_ms (the caller's draw in
 *     [0, WR_OPENING_SPREAD_MS)), so the crowd that waited does not ask in
 *     one instant; once the opening has passed but the line is not placed
 *     yet: WR_POLL_UNPLACED_MS;
 *   - with a place and an ETA: three quarters of the ETA (it is approximate;
 *     asking a little early costs one ask, late costs the turn); without
 *     an ETA: WR_POLL_UNKNOWN_MS;
 *   - with a place past those admission may still call (callable, when
 *     known: the units left and their margin, less the admissions
 *     outstanding): as late as the place allows. The turn comes only if
 *     units come back or those ahead leave, so asking sooner would only add
 *     to the sale's load; the admission it may bring lives far longer
 *     (producer.queue_token_life_s);
 * never sooner than WR_POLL_MIN_MS, never later than a third of the
 * abandonment time (producer.queue_abandon_s), so the place is kept. */
#define WR_POLL_MIN_MS 300
#define WR_POLL_UNPLACED_MS 500
#define WR_POLL_UNKNOWN_MS 1000
#define WR_OPENING_SPREAD_MS 1000
/* The longest a waiter may wait between asks and still keep the place: a
 * third of the abandonment time (producer.queue_abandon_s), in ms. */
int64_t wr_keep_place_ms(int64_t abandon_s);
int64_t wr_poll_after_ms(int64_t position, int64_t eta_ms, int64_t until_start_ms, int64_t abandon_s,
                         int64_t jitter_ms, int64_t callable);

#endif
