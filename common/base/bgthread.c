#include "bgthread.h"

#include <errno.h>

#include "util.h"

int bgt_start(struct bgthread *t, void *(*fn)(void *), void *arg)
{
    int rc;
    t->running = false;
    atomic_store(&t->stop, false);
    if ((rc = pthread_mutex_init(&t->mu, NULL)) != 0) {
        errno = rc;
        return -1;
    }
    if (util_cond_init_mono(&t->cv) != 0) {
        rc = ENOMEM;
        goto fail_mu;
    }
    if ((rc = pthread_create(&t->thread, NULL, fn, arg)) != 0)
        goto fail;
    t->running = true;
    return 0;
fail:
    pthread_cond_destroy(&t->cv);
fail_mu:
    pthread_mutex_destroy(&t->mu);
    errno = rc;
    return -1;
}

void bgt_stop(struct bgthread *t)
{
    if (!t->running)
        return;
    pthread_mutex_lock(&t->mu);
    atomic_store(&t->stop, true);
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->thread, NULL);
    t->running = false;
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
}

bool bgt_stopping(struct bgthread *t)
{
    return atomic_load(&t->stop);
}

void bgt_wake(struct bgthread *t)
{
    pthread_cond_signal(&t->cv);
}

void bgt_wait_ms(struct bgthread *t, int64_t ms)
{
    struct timespec ts;
    if (atomic_load(&t->stop))
        return;
    if (ms < 0) {
        pthread_cond_wait(&t->cv, &t->mu);
        return;
    }
    ts = util_deadline_ts(ms);
    pthread_cond_timedwait(&t->cv, &t->mu, &ts);
}

void bgt_wait_until(struct bgthread *t, int64_t at_ms)
{
    struct timespec ts = { .tv_sec = (time_t)(at_ms / 1000), .tv_nsec = (long)(at_ms % 1000) * 1000000L };
    if (atomic_load(&t->stop))
        return;
    if (at_ms == INT64_MAX)
        pthread_cond_wait(&t->cv, &t->mu);
    else
        pthread_cond_timedwait(&t->cv, &t->mu, &ts);
}

void bgt_sleep_ms(struct bgthread *t, int64_t ms)
{
    int64_t end = util_mono_ms() + ms;
    pthread_mutex_lock(&t->mu);
    /* A loop: a wait may end early without a wake (spurious wakeups). */
    while (!atomic_load(&t->stop) && util_mono_ms() < end)
        bgt_wait_until(t, end);
    pthread_mutex_unlock(&t->mu);
}
