/* fifo: a first-in first-out list of the caller's own structs, linked
 * through a pointer member of theirs (intrusive: pushing allocates nothing,
 * so it cannot fail).
 *
 * An element is in one list at a time; the list owns none of them: taking
 * one out hands it back. The list takes no lock: it is guarded by its
 * owner's mutex, and fifo_hand_over is the push-and-signal that hands work
 * to the thread waiting on that mutex's condition variable. */
#ifndef SECKILL_FIFO_H
#define SECKILL_FIFO_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

struct fifo {
    void *head, *tail;
    size_t len;
    size_t link; /* where an element's next pointer is: FIFO_LINK */
};

/* The place of type's member next, a type * (the compiler checks that it
 * is one), for fifo_init. */
#define FIFO_LINK(type, next) (offsetof(type, next) + 0 * sizeof(((type *)0)->next == (type *)0))

/* An empty list of elements linked through link (FIFO_LINK). */
void fifo_init(struct fifo *f, size_t link);
static inline bool fifo_empty(const struct fifo *f)
{
    return f->head == NULL;
}
/* Append e. */
void fifo_push(struct fifo *f, void *e);
/* Append the n elements from head to tail, already linked in order. */
void fifo_push_chain(struct fifo *f, void *head, void *tail, size_t n);
/* Take the first element out, or NULL when empty. */
void *fifo_pop(struct fifo *f);
/* Take every element out at once: the first (they stay linked in order, the
 * last one's next NULL), or NULL when empty. *n, when not NULL: how many. */
void *fifo_take_all(struct fifo *f, size_t *n);
/* Push-and-signal: append the chain under mu and signal cv, so that the
 * thread waiting on cv with mu finds it. An empty chain (head NULL): nothing. */
void fifo_hand_over(struct fifo *f, pthread_mutex_t *mu, pthread_cond_t *cv, void *head, void *tail,
                    size_t n);

#endif
