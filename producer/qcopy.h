/* qcopy: this producer's own copy of each waiting room's line (issue #58),
 * so that a waiter who asks where they stand is answered on the HTTP
 * thread, without Redis.
 *
 * Why: at a sale's opening the whole pre-queue asks at once (each waiter
 * was told to come back then), and an ask through Redis (seckill_queue, on
 * the room's thread) costs the machine several times a sold-out answer
 * (bench/wroom's calibration). On two cores that crowd took the CPU the
 * sale needed in its first seconds; answered here, an ask costs about what
 * a sold-out answer does.
 *
 * What it holds, per item with a room:
 *   - the line's pre-queue part, once the opening has placed it (each
 *     member's place, and the places in order), fetched once by the
 *     admitter (producer/admitter.h). It does not change afterwards: a
 *     member who loses their place and joins again goes behind everyone
 *     (KEYS_QUEUE_LATE and up), out of this part;
 *   - the item's state as of this producer's last admission step: the last
 *     place called, the admission rate for the ETAs, the units left and
 *     the admissions outstanding, the sale's window.
 *
 * qc_ask answers only what the copy knows: a member of the pre-queue whose
 * place has not been called yet, while units remain beyond the admissions
 * outstanding (so the item is not sold out), the window is open and the
 * state is at most QC_FRESH_MS old. The answer is seckill_queue's: waiting,
 * the position (the places after the last one called, up to theirs: later
 * joiners are all behind), the ETA from the same rate. Every other ask or
 * join (a place to take, a later joiner, a turn that has come, sold out,
 * ended, no copy yet) goes to Redis as before.
 *
 * How stale: one admission step (ADT_TICK_MS) and its round trip. A waiter
 * admitted since is told "waiting" once more and asks again within
 * poll_after_s, well inside an admission's life. The units beyond the
 * admissions outstanding can only be taken with an admission, which only
 * a step grants: with one producer, whose steps update this copy, no unit
 * of those is sold before the copy knows; with several, another's step may
 * admit in between, and a waiter may hear "waiting" up to a step after the
 * item sold out.
 *
 * Each answer records that the waiter asked, as seckill_queue does (the
 * admission passes over a waiter not seen for producer.queue_abandon_s).
 * The records wait here; the admitter writes them, one HSET per item,
 * ahead of its next step. Past QC_SEEN_MAX records waiting (Redis away),
 * asks go to Redis again rather than lose a record.
 *
 * Threads: the admitter writes (qc_step, qc_set_line, qc_forget,
 * qc_take_seen); the HTTP thread reads (qc_ask). A lock guards each side;
 * a line is built by its fetcher alone, then handed over whole. */
#ifndef SECKILL_QCOPY_H
#define SECKILL_QCOPY_H

#include <stddef.h>
#include <stdint.h>

/* The oldest state qc_ask answers from: a few admission steps. */
#define QC_FRESH_MS 500
/* The most asks recorded and not yet written to Redis. */
#define QC_SEEN_MAX (1 << 20)

struct qcopy;

/* One item's pre-queue, placed: users and their places, added in the
 * line's order (as ZRANGEBYSCORE gives them). */
struct qc_line;

/* An item's state after an admission step. */
struct qc_state {
    int64_t starts_ms, ends_ms; /* the sale's window (ends 0: none) */
    int64_t called;             /* the last place called; -1: none yet */
    int64_t rate_milli;         /* admissions per 1000 s, for ETAs; 0: none known */
    int64_t stock, outstanding; /* units left in Redis, admissions not yet spent */
    int64_t callable;           /* how many more admission may give: the units left
                                   and their margin (producer.queue_margin_pct),
                                   less the admissions outstanding */
    int placed;                 /* the opening has placed the whole pre-queue */
    uint64_t seed_id;           /* which opening (a hash of its seed): one lost
                                   with a failover is done again, elsewhere */
};

/* A record that user asked about item at at_ms, told an ETA ending at
 * eta_at_ms (0: none): the value seckill_queue stores, "at_ms:eta_at_ms". */
struct qc_seen {
    int64_t item, user, at_ms, eta_at_ms;
};

struct qc_answer {
    int64_t position;  /* 1 is next */
    int64_t eta_ms;    /* -1 when no rate is known */
    int64_t starts_ms; /* the sale's opening */
    int64_t callable;  /* places admission may still call (qc_state) */
};

/* 0, or -1 with err set. */
int qc_new(struct qcopy **out, char *err, size_t errlen);
void qc_free(struct qcopy *v);

/* --- the admitter's side --- */

struct qc_line *qc_line_new(void);
/* The next member: 0; 1 when already in (the fetch's pages overlap by one
 * place); -1 when the place is before the last one added, or out of memory. */
int qc_line_add(struct qc_line *l, int64_t user, int64_t place);
/* The last place added, or -1. */
int64_t qc_line_last(const struct qc_line *l);
size_t qc_line_size(const struct qc_line *l);
void qc_line_free(struct qc_line *l);

/* The item's state after a step (its entry made when new; another sale or
 * opening, by starts_ms and seed_id, or none placed, drops the line). 0, or
 * -1 out of memory. */
int qc_step(struct qcopy *v, int64_t item, const struct qc_state *s, int64_t now_mono_ms);
/* Whether the item's line of the opening seed_id is here. */
int qc_has_line(struct qcopy *v, int64_t item, uint64_t seed_id);
/* Hand over the item's whole line of the opening seed_id (freed here when
 * the item is not known, or is at another opening by now). */
void qc_set_line(struct qcopy *v, int64_t item, uint64_t seed_id, struct qc_line *l);
/* The item has no room any more. */
void qc_forget(struct qcopy *v, int64_t item);
/* The asks recorded since the last call: *buf (grown as needed, the
 * caller's to free) holds them; their count. */
size_t qc_take_seen(struct qcopy *v, struct qc_seen **buf, size_t *cap);

/* --- the HTTP thread's side --- */

/* user asks (or joins) item at this instant: 1 answered into *a (waiting),
 * the ask recorded; 0 when only Redis can answer. */
int qc_ask(struct qcopy *v, int64_t item, int64_t user, int64_t now_mono_ms, int64_t now_wall_ms,
           struct qc_answer *a);

#endif
