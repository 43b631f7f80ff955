#include "reqwatch.h"

#include <sys/socket.h>

int rw_init(struct rw *w)
{
    w->armed.prev = w->armed.next = &w->armed;
    return pthread_mutex_init(&w->mu, NULL) == 0 ? 0 : -1;
}

void rw_destroy(struct rw *w) { pthread_mutex_destroy(&w->mu); }

static void unlink_slot(struct rw_slot *s)
{
    s->prev->next = s->next;
    s->next->prev = s->prev;
    s->prev = s->next = NULL;
}

void rw_arm(struct rw *w, struct rw_slot *s, int fd, int64_t now_us)
{
    pthread_mutex_lock(&w->mu);
    if (s->next)
        unlink_slot(s);
    s->fd = fd;
    s->since_us = now_us;
    s->prev = w->armed.prev;
    s->next = &w->armed;
    w->armed.prev->next = s;
    w->armed.prev = s;
    pthread_mutex_unlock(&w->mu);
}

void rw_disarm(struct rw *w, struct rw_slot *s)
{
    pthread_mutex_lock(&w->mu);
    if (s->next)
        unlink_slot(s);
    pthread_mutex_unlock(&w->mu);
}

int rw_expire(struct rw *w, int64_t cutoff_us)
{
    int n = 0;
    pthread_mutex_lock(&w->mu);
    while (w->armed.next != &w->armed && w->armed.next->since_us <= cutoff_us) {
        struct rw_slot *s = w->armed.next;
        unlink_slot(s);
        shutdown(s->fd, SHUT_RDWR);
        n++;
    }
    pthread_mutex_unlock(&w->mu);
    return n;
}
