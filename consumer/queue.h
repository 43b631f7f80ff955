/* queue: the messages of the pipeline and the FIFOs that carry them.
 *
 * A cmsg is one Kafka message on its way through the consumer: the poll
 * thread creates it, a worker (or the dead-letter producer) settles it, and
 * it comes back to the poll thread through a done queue, which alone may
 * move the partition's watermark and free it. */
#ifndef SECKILL_QUEUE_H
#define SECKILL_QUEUE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "order.h"

/* How a message was settled. */
enum cmsg_outcome {
    CMSG_PENDING = 0,
    CMSG_INSERTED,     /* a new row in orders */
    CMSG_DUPLICATE,    /* the same order was already there (redelivery) */
    CMSG_NO_ITEM,      /* rejected: the item does not exist */
    CMSG_NO_STOCK,     /* rejected: it would drive stock below zero */
    CMSG_ID_CONFLICT,  /* rejected: the order id exists with another user/item */
    CMSG_DUP_BUYER,    /* rejected: the user holds another order for the item */
    CMSG_DEAD_LETTER,  /* written to the dead-letter topic and acknowledged */
    CMSG_RETRY,        /* not settled yet: stale fence or lost race, try again */
};

struct cmsg {
    struct cmsg *next;
    int32_t partition;
    int64_t offset;
    uint32_t epoch;        /* the partition's assignment generation */
    struct order o;
    int outcome;           /* enum cmsg_outcome */
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
/* Free a chain of messages linked through next. */
void cmsg_free_list(struct cmsg *m);

/* An intrusive FIFO of cmsg with a mutex and a condition variable. */
struct queue {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct cmsg *head, *tail;
    size_t len;
};

int q_init(struct queue *q);
void q_destroy(struct queue *q); /* frees what is still queued */
void q_push(struct queue *q, struct cmsg *m);
/* Append a chain of n messages linked through next. */
void q_push_list(struct queue *q, struct cmsg *head, struct cmsg *tail, size_t n);
/* Move up to max messages into out[], waiting up to wait_ms for the first
 * and then up to linger_ms more for the batch to fill. Returns how many. */
size_t q_pop_batch(struct queue *q, struct cmsg **out, size_t max, int wait_ms, int linger_ms);
/* Take everything at once, without waiting (NULL when empty). */
struct cmsg *q_take_all(struct queue *q);
size_t q_len(struct queue *q);
/* Wake every waiter (on stop). */
void q_wake(struct queue *q);

#endif
