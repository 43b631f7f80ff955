/* paywait: the payments held by the payments thread (payments.h), from
 * their fetch until a batch takes them, and the set of those waiting for
 * their orders (issue #55).
 *
 * A payment fetched (pw_take) is judged first: a malformed message (bad
 * JSON, another version, a key that is not its user), one no payment key
 * signed (paysig.h: counted as payments_unsigned) and one for an order id
 * no producer could have issued (its block 0) go to the dead-letter topic
 * at once, with their reason. The others are fresh: held, in arrival order.
 *
 * Once per turn, before any lock, pw_check refuses the fresh payments of a
 * block above the highest order_id_blocks holds (read again when a payment
 * names a higher one: payments_never_issued; a consumer not allowed to read
 * it, migration 015 missing, says so once and lets them wait), then looks
 * for the orders of the fresh payments and of the waiting ones due, one
 * statement per PW_LOOK_CHUNK (pay_waiting.sql, no lock, no write). A
 * payment whose order is there (or was refused for its buyer) is ready: the
 * caller's to take in batches, in arrival order (the ready list). One whose
 * order is not waits: looked for again after 50 ms doubling to 1 s, up to
 * consumer.payment_wait_ms from its fetch, then dead-lettered ("order
 * unknown"). When an order is found, every payment waiting for it is
 * ready, in the order they came, due or not (a later payment of an order
 * never overtakes the first).
 *
 * The bound. The waiting set holds at most consumer.payment_wait_max
 * payments and PW_WAIT_BYTES_MAX of them (payments, messages and keys);
 * past either, the payment that has waited longest is dead-lettered
 * ("waiting set full", counted as payments_wait_full): nothing is dropped
 * unsaid. The fresh and ready payments (pw_held) are the caller's to bound
 * (it pauses fetching).
 *
 * Done, a payment's offset may move (pw_done); a waiting one's may not, so
 * it holds its partition's committed offset back, and a consumer that
 * takes the partition reads it again. Dead letters (pw_refuse, and the
 * above) go through the caller's kloop, said in one line per second at
 * most with how many came since; the wait is said once while payments
 * wait.
 *
 * Its statements (pw_stmts) go on the caller's PostgreSQL session, whose
 * round trips it runs; a failure is said with the caller's say_pg
 * ("payments: postgres"), so one outage is one line. A struct pw is the
 * caller's (embedded) and belongs to its thread. */
#ifndef SECKILL_PAYWAIT_H
#define SECKILL_PAYWAIT_H

#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cfg.h"
#include "i64map.h"
#include "kloop.h"
#include "log.h"
#include "paymsg.h"
#include "pgtrip.h"

/* The most bytes the waiting set holds (its payments, their messages and
 * keys): with a message of a few hundred bytes, consumer.payment_wait_max
 * (50,000 by default) binds first; a set of huge messages stops here. */
#define PW_WAIT_BYTES_MAX (64u << 20)
/* Orders looked for per statement. */
#define PW_LOOK_CHUNK 1024

/* The statements of the look-up, for the caller's session. */
#define PW_NSTMTS 2
extern const struct pgsess_stmt pw_stmts[PW_NSTMTS];

/* One payment message on its way: from the poll to done (its offset may
 * move) or to the dead-letter topic. */
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
    /* The caller's, for its batches (payments.c): the payment's place in
     * the batch under way (-1: none), and, once committed but not told to
     * Redis, what its first commit did (-1: nothing yet). */
    int slot;
    int first_kind;
};

/* Payments in the order they joined the list, and what they weigh. */
struct plist {
    struct pay *head, **tailp;
    size_t n, bytes;
};

struct pw {
    const struct cfg *cfg;
    struct kloop *k;           /* the caller's: offsets and dead letters */
    struct pgtrip *trip;       /* the caller's */
    struct log_repeat *say_pg; /* the caller's */
    /* fresh: not looked for yet; ready: found (the caller's to take);
     * wait: not found yet. Each in arrival order. */
    struct plist fresh, ready, wait;
    int64_t wait_due;          /* monotonic: the first waiting payment's next look */
    size_t wait_bytes_max;     /* PW_WAIT_BYTES_MAX (a test may lower it) */
    int64_t max_block;         /* the highest order id block seen taken */
    size_t over_max;           /* fresh payments of a block above it */
    struct i64map found;       /* pw_check: the orders found */
    struct pgarr ids[2];       /* a look-up's orders and users */
    struct log_summary said_letters;
    struct log_repeat say_wait, say_blocks;
};

/* Ready w for c, with the caller's kloop, trip (its session prepares
 * pw_stmts) and say_pg. Nothing is allocated yet. A zeroed w may be
 * pw_free'd. */
void pw_init(struct pw *w, const struct cfg *c, struct kloop *k, struct pgtrip *trip,
             struct log_repeat *say_pg);
/* Free every payment held (their offsets never moved) and the room. */
void pw_free(struct pw *w);

/* A message fetched: tracked, judged, then fresh or dead-lettered. */
void pw_take(struct pw *w, const rd_kafka_message_t *km);
/* The fresh and the ready payments: what the caller bounds. */
size_t pw_held(const struct pw *w);
/* Refuse the fresh payments of ids never issued, look for the orders of the
 * fresh ones and of the waiting ones due, and sort them out: ready, waiting
 * or dead-lettered. 0, or -1: PostgreSQL failed (said; nothing moved). */
int pw_check(struct pw *w, int64_t now);

/* *pp, a ready payment, is done: out of the list, its offset may move. */
void pw_done(struct pw *w, struct pay **pp);
/* *pp, a ready payment, goes to the dead-letter topic with why. */
void pw_refuse(struct pw *w, struct pay **pp, const char *why);
/* *pp, a ready payment whose order the batch did not find after all, waits
 * again (or is dead-lettered: its wait is over). */
void pw_wait_again(struct pw *w, struct pay **pp, int64_t now);
/* y (in no list) waits for its order, at the end of the waiting set, which
 * makes room first (see the bound). */
void pw_wait_add(struct pw *w, struct pay *y);
/* After a look that found y's order nowhere: true and y's next look
 * (doubling from 50 ms to 1 s, and once more when the wait is over), or
 * false: consumer.payment_wait_ms since its fetch is over. */
bool pw_wait_more(const struct cfg *c, struct pay *y, int64_t now);

/* Partitions taken away: what is held for them is the next owner's. */
void pw_drop(struct pw *w, const rd_kafka_topic_partition_list_t *parts);
/* After a turn (force: at the stop): the gauge, the lines said once per
 * state change or per period. When the waiting set wants the thread back
 * (INT64_MAX: never). */
int64_t pw_after_turn(struct pw *w, bool force);

#endif
