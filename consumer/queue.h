/* queue: the messages of the pipeline and the FIFOs that carry them.
 *
 * A cmsg is one Kafka message on its way through the consumer: the poll
 * thread creates it, a worker (or the dead-letter producer) settles it, and
 * it comes back to the poll thread through a done queue, which alone may
 * move the partition's watermark and free it. */
#ifndef SECKILL_QUEUE_H
#define SECKILL_QUEUE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fifo.h"
#include "order.h"
#include "ostate.h"

/* How a message was settled: every outcome declared once, here.
 *
 * X(name, reason, metric, refusal, status)
 *   name     the enum constant CMSG_<name>
 *   reason   the word a refusal is recorded under: order_rejections.reason
 *            (its CHECK list in sql/migrations/004_order_rejections.sql must
 *            hold exactly these; tests/unit/test_outcomes.c checks it) and the
 *            buyer's status in Redis; NULL for an outcome that is no refusal
 *   metric   CMSG_METRIC(member of struct cmetrics) the worker bumps when it
 *            settles the order, or CMSG_NO_METRIC (dead letters are counted
 *            once Kafka acknowledges them, in the pipeline)
 *   refusal  1 when the order is refused for good and recorded in
 *            order_rejections
 *   status   the state seckill_settle stores as the buyer's status
 *            (common/sale/ostate.h): OST_CONFIRMED, OST_REFUSED (now, or
 *            before for REFUSED_BEFORE, with the reason it was refused for
 *            then), OST_NONE for an outcome that never reaches Redis through
 *            it (not settled, dead-lettered, or a cancel: its unit goes back
 *            to Redis from order_returns, consumer/outbox.c)
 *
 * A cancel's outcome is CANCELLED or CANCEL_NOOP (or DEAD_LETTER, RETRY);
 * an order's is never one of those two. */
#define CMSG_OUTCOMES(X)                                                                            \
    X(PENDING, NULL, CMSG_NO_METRIC, 0, OST_NONE)                 /* not decided yet */              \
    X(INSERTED, NULL, CMSG_METRIC(persisted), 0, OST_CONFIRMED)   /* a new row in orders */          \
    X(DUPLICATE, NULL, CMSG_METRIC(duplicates), 0, OST_CONFIRMED) /* already there (redelivery) */   \
    X(NO_ITEM, "no_item", CMSG_METRIC(rej_no_item), 1, OST_REFUSED) /* the item does not exist */    \
    X(NO_STOCK, "no_stock", CMSG_METRIC(rej_no_stock), 1, OST_REFUSED) /* stock would go below zero */\
    /* the order id exists with another user or item */                                             \
    X(ID_CONFLICT, "id_conflict", CMSG_METRIC(rej_id_conflict), 1, OST_REFUSED)                     \
    /* the user holds another order for the item */                                                 \
    X(DUP_BUYER, "dup_buyer", CMSG_METRIC(rej_dup_buyer), 1, OST_REFUSED)                           \
    /* refused before (order_rejections holds it): a redelivery, a replay or a re-publication;      \
     * counted as a duplicate, and refused still, whatever came back to the stock since */         \
    X(REFUSED_BEFORE, NULL, CMSG_METRIC(duplicates), 0, OST_REFUSED)                                \
    /* written to the dead-letter topic and acknowledged */                                         \
    X(DEAD_LETTER, NULL, CMSG_NO_METRIC, 0, OST_NONE)                                               \
    /* not settled yet: stale fence or lost race, try again */                                      \
    X(RETRY, NULL, CMSG_NO_METRIC, 0, OST_NONE)                                                     \
    /* a buyer's cancel (kind ORDER_CANCEL): the order was pending payment and is cancelled now,    \
     * its unit given back to stock_left and recorded in order_returns for Redis */                 \
    X(CANCELLED, NULL, CMSG_METRIC(cancels_applied), 0, OST_NONE)                                   \
    /* a buyer's cancel that changes nothing: the order is not pending payment (paid, expired,      \
     * cancelled already, final, or unknown); a replay of the topic lands here */                   \
    X(CANCEL_NOOP, NULL, CMSG_METRIC(cancels_noop), 0, OST_NONE)

/* The metric column names a counter of cmetrics.h; it expands only where
 * that header is included (cmetrics.c), so queue.h stays free of it. */
#define CMSG_METRIC(member) (&cm.member)
#define CMSG_NO_METRIC NULL

enum cmsg_outcome {
#define CMSG_ENUM(name, reason, metric, refusal, status) CMSG_##name,
    CMSG_OUTCOMES(CMSG_ENUM)
#undef CMSG_ENUM
    CMSG_NOUTCOMES
};

struct cmsg {
    struct cmsg *next;
    int32_t partition;
    int64_t offset;
    uint32_t epoch;        /* the partition's assignment generation */
    struct order o;
    int outcome;           /* enum cmsg_outcome */
    /* INSERTED or DUPLICATE: the end of the order's payment window in ms
     * since the epoch while it is pending payment (sink_write), for the
     * buyers' status (OST_PENDING_PAYMENT, settle.h); 0 for any other order. */
    int64_t pay_by_ms;
    /* REFUSED_BEFORE: the refusal it was recorded under then (a refusal's
     * outcome), for the buyer's status; 0 otherwise. */
    int refused_as;
    /* The slot its reservation is in (common/sale/bucket.h: its buyer's
     * bucket, or BUCKET_HOME), as settle learns it. */
    int salt;
    /* Only for dead letters: the raw message and why it was refused. */
    void *payload;
    size_t payload_len;
    void *key;
    size_t key_len;
    char *error;
};

void cmsg_free(struct cmsg *m);
/* The reason a refusal is recorded under (order_rejections.reason, the
 * buyer's status), or NULL for an outcome that is not a refusal. */
const char *cmsg_reason(int outcome);
/* True for a refusal recorded in order_rejections. */
bool cmsg_is_refusal(int outcome);
/* The refusal recorded under reason (order_rejections.reason), or
 * CMSG_PENDING for a word no refusal has. */
int cmsg_of_reason(const char *reason);
/* The reason m's buyer is told, for the buyer's status: its refusal's, or
 * the one it was refused for before (REFUSED_BEFORE); NULL when m is not
 * refused. */
const char *cmsg_refusal_reason(const struct cmsg *m);
/* The buyer's status seckill_settle stores (OST_CONFIRMED or OST_REFUSED),
 * OST_NONE for an outcome never settled in Redis. */
enum ost_state cmsg_status(int outcome);
/* Free a chain of messages linked through next. */
void cmsg_free_list(struct cmsg *m);

/* A FIFO of cmsg (fifo.h) with a mutex and a condition variable of its own:
 * it is waited on by batch (q_pop_batch), with a linger, and by several
 * threads, not by one bgthread (bgthread.h). */
struct queue {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct fifo f;
};

int q_init(struct queue *q);
void q_destroy(struct queue *q); /* frees what is still queued */
void q_push(struct queue *q, struct cmsg *m);
/* Append a chain of n messages linked through next. */
void q_push_list(struct queue *q, struct cmsg *head, struct cmsg *tail, size_t n);
/* Move up to max messages into out[], waiting up to wait_ms for the first
 * and then up to linger_ms more for the batch to fill. Returns how many. */
size_t q_pop_batch(struct queue *q, struct cmsg **out, size_t max, int wait_ms, int linger_ms);
/* Wait up to wait_ms until something is queued, without taking it; true
 * when something is. */
bool q_wait(struct queue *q, int wait_ms);
/* Take everything at once, without waiting (NULL when empty). */
struct cmsg *q_take_all(struct queue *q);
/* Wake every waiter (on stop). */
void q_wake(struct queue *q);

#endif
