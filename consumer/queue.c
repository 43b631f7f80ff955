#include "queue.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

/* The table's columns as arrays indexed by outcome. */
static const struct {
    const char *reason;
    bool refusal;
    enum ost_state status;
} outcomes[] = {
#define CMSG_ROW(name, reason, metric, refusal, status) [CMSG_##name] = { reason, refusal, status },
    CMSG_OUTCOMES(CMSG_ROW)
#undef CMSG_ROW
};

static bool known(int outcome)
{
    return outcome >= 0 && outcome < CMSG_NOUTCOMES;
}

const char *cmsg_reason(int outcome)
{
    return known(outcome) ? outcomes[outcome].reason : NULL;
}

bool cmsg_is_refusal(int outcome)
{
    return known(outcome) && outcomes[outcome].refusal;
}

int cmsg_of_reason(const char *reason)
{
    for (int o = 0; reason && o < CMSG_NOUTCOMES; o++)
        if (outcomes[o].refusal && strcmp(outcomes[o].reason, reason) == 0)
            return o;
    return CMSG_PENDING;
}

const char *cmsg_refusal_reason(const struct cmsg *m)
{
    return cmsg_reason(m->outcome == CMSG_REFUSED_BEFORE ? m->refused_as : m->outcome);
}

enum ost_state cmsg_status(int outcome)
{
    return known(outcome) ? outcomes[outcome].status : OST_NONE;
}

void cmsg_free(struct cmsg *m)
{
    if (!m)
        return;
    free(m->payload);
    free(m->key);
    free(m->error);
    free(m);
}

void cmsg_free_list(struct cmsg *m)
{
    while (m) {
        struct cmsg *n = m->next;
        cmsg_free(m);
        m = n;
    }
}

int q_init(struct queue *q)
{
    fifo_init(&q->f, FIFO_LINK(struct cmsg, next));
    if (pthread_mutex_init(&q->mu, NULL) != 0)
        return -1;
    /* Monotonic waits: a wall clock step must not stretch a linger. */
    if (util_cond_init_mono(&q->cv) != 0)
        goto fail;
    return 0;
fail:
    pthread_mutex_destroy(&q->mu);
    return -1;
}

void q_destroy(struct queue *q)
{
    cmsg_free_list(fifo_take_all(&q->f, NULL));
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
}

void q_push_list(struct queue *q, struct cmsg *head, struct cmsg *tail, size_t n)
{
    fifo_hand_over(&q->f, &q->mu, &q->cv, head, tail, n);
}

void q_push(struct queue *q, struct cmsg *m)
{
    q_push_list(q, m, m, 1);
}

static size_t take_locked(struct queue *q, struct cmsg **out, size_t have, size_t max)
{
    while (have < max && !fifo_empty(&q->f))
        out[have++] = fifo_pop(&q->f);
    return have;
}

/* Wait, q->mu held, up to wait_ms for something to be queued. */
static void wait_locked(struct queue *q, int wait_ms)
{
    struct timespec ts;
    if (!fifo_empty(&q->f) || wait_ms <= 0)
        return;
    ts = util_deadline_ts(wait_ms);
    while (fifo_empty(&q->f))
        if (pthread_cond_timedwait(&q->cv, &q->mu, &ts) == ETIMEDOUT)
            break;
}

size_t q_pop_batch(struct queue *q, struct cmsg **out, size_t max, int wait_ms, int linger_ms)
{
    size_t n = 0;
    struct timespec ts;
    pthread_mutex_lock(&q->mu);
    wait_locked(q, wait_ms);
    n = take_locked(q, out, n, max);
    if (n > 0 && n < max && linger_ms > 0) {
        /* Linger for a fuller batch: one transaction of many rows costs about
         * what one of a few rows costs. */
        ts = util_deadline_ts(linger_ms);
        while (n < max) {
            if (fifo_empty(&q->f) && pthread_cond_timedwait(&q->cv, &q->mu, &ts) == ETIMEDOUT) {
                n = take_locked(q, out, n, max);
                break;
            }
            n = take_locked(q, out, n, max);
        }
    }
    pthread_mutex_unlock(&q->mu);
    return n;
}

bool q_wait(struct queue *q, int wait_ms)
{
    bool any;
    pthread_mutex_lock(&q->mu);
    wait_locked(q, wait_ms);
    any = !fifo_empty(&q->f);
    pthread_mutex_unlock(&q->mu);
    return any;
}

struct cmsg *q_take_all(struct queue *q)
{
    struct cmsg *h;
    pthread_mutex_lock(&q->mu);
    h = fifo_take_all(&q->f, NULL);
    pthread_mutex_unlock(&q->mu);
    return h;
}

void q_wake(struct queue *q)
{
    pthread_mutex_lock(&q->mu);
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}
