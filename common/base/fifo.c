#include "fifo.h"

#include <string.h>

/* An element's next pointer, read and written as bytes: the list does not
 * know the element's type, and memcpy copies the pointer whatever it points
 * to (a cast to void ** would break the aliasing rules). */
static void *next_of(const struct fifo *f, const void *e)
{
    void *n;
    memcpy(&n, (const char *)e + f->link, sizeof(n));
    return n;
}

static void set_next(const struct fifo *f, void *e, void *n)
{
    memcpy((char *)e + f->link, &n, sizeof(n));
}

void fifo_init(struct fifo *f, size_t link)
{
    f->head = f->tail = NULL;
    f->len = 0;
    f->link = link;
}

void fifo_push_chain(struct fifo *f, void *head, void *tail, size_t n)
{
    if (!head)
        return;
    set_next(f, tail, NULL);
    if (f->tail)
        set_next(f, f->tail, head);
    else
        f->head = head;
    f->tail = tail;
    f->len += n;
}

void fifo_push(struct fifo *f, void *e)
{
    fifo_push_chain(f, e, e, 1);
}

void *fifo_pop(struct fifo *f)
{
    void *e = f->head;
    if (!e)
        return NULL;
    f->head = next_of(f, e);
    if (!f->head)
        f->tail = NULL;
    f->len--;
    set_next(f, e, NULL);
    return e;
}

void *fifo_take_all(struct fifo *f, size_t *n)
{
    void *h = f->head;
    if (n)
        *n = f->len;
    f->head = f->tail = NULL;
    f->len = 0;
    return h;
}

void fifo_hand_over(struct fifo *f, pthread_mutex_t *mu, pthread_cond_t *cv, void *head, void *tail, size_t n)
{
    if (!head)
        return;
    pthread_mutex_lock(mu);
    fifo_push_chain(f, head, tail, n);
    pthread_cond_signal(cv);
    pthread_mutex_unlock(mu);
}
