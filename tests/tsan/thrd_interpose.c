/* thrd_interpose: C11 threads over pthreads, linked into the TSan build only.
 *
 * Why: Debian's librdkafka uses C11 threads (thrd_create, mtx_*, cnd_*,
 * call_once; glibc 2.34+ has them in libc), and the ThreadSanitizer
 * runtimes of gcc 12 and clang 14 intercept the pthread functions but not
 * these. A thread started by thrd_create has no TSan state, and the first
 * allocation in it (getaddrinfo in a broker thread) crashes inside TSan's
 * allocator; a mutex taken by mtx_lock is invisible to TSan, so every
 * access librdkafka guards with one is reported as a race. Defined in the
 * executable, these symbols come before libc's in the dynamic lookup, so
 * librdkafka's calls land here and go through the intercepted pthread
 * functions.
 *
 * glibc's own versions are thin wrappers over the pthread ones on the same
 * storage (thrd_t is pthread_t, mtx_t and cnd_t are the size of
 * pthread_mutex_t and pthread_cond_t, once_flag of pthread_once_t), so this
 * is what glibc does, with the calls made where TSan sees them. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <threads.h>

/* thrd_start_t returns int, pthread's start routine void *: a trampoline
 * carries the function and its argument across. */
struct trampoline {
    thrd_start_t fn;
    void *arg;
};

static void *trampoline_run(void *p)
{
    struct trampoline t = *(struct trampoline *)p;
    free(p);
    return (void *)(intptr_t)t.fn(t.arg);
}

static int thrd_err(int e)
{
    if (e == 0)
        return thrd_success;
    return e == ENOMEM ? thrd_nomem : e == ETIMEDOUT ? thrd_timedout : e == EBUSY ? thrd_busy : thrd_error;
}

int thrd_create(thrd_t *thr, thrd_start_t fn, void *arg)
{
    struct trampoline *t = malloc(sizeof(*t));
    int e;
    if (!t)
        return thrd_nomem;
    t->fn = fn;
    t->arg = arg;
    e = pthread_create(thr, NULL, trampoline_run, t);
    if (e != 0)
        free(t);
    return thrd_err(e);
}

int thrd_join(thrd_t thr, int *res)
{
    void *ret = NULL;
    int e = pthread_join(thr, &ret);
    if (e == 0 && res)
        *res = (int)(intptr_t)ret;
    return thrd_err(e);
}

int thrd_detach(thrd_t thr) { return thrd_err(pthread_detach(thr)); }

thrd_t thrd_current(void) { return pthread_self(); }

_Noreturn void thrd_exit(int res) { pthread_exit((void *)(intptr_t)res); }

int mtx_init(mtx_t *m, int type)
{
    pthread_mutexattr_t attr;
    int e;
    pthread_mutexattr_init(&attr);
    if (type & mtx_recursive)
        pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    e = pthread_mutex_init((pthread_mutex_t *)m, &attr);
    pthread_mutexattr_destroy(&attr);
    return thrd_err(e);
}

void mtx_destroy(mtx_t *m) { pthread_mutex_destroy((pthread_mutex_t *)m); }
int mtx_lock(mtx_t *m) { return thrd_err(pthread_mutex_lock((pthread_mutex_t *)m)); }
int mtx_trylock(mtx_t *m) { return thrd_err(pthread_mutex_trylock((pthread_mutex_t *)m)); }
int mtx_unlock(mtx_t *m) { return thrd_err(pthread_mutex_unlock((pthread_mutex_t *)m)); }

int mtx_timedlock(mtx_t *restrict m, const struct timespec *restrict ts)
{
    return thrd_err(pthread_mutex_timedlock((pthread_mutex_t *)m, ts));
}

int cnd_init(cnd_t *c) { return thrd_err(pthread_cond_init((pthread_cond_t *)c, NULL)); }
void cnd_destroy(cnd_t *c) { pthread_cond_destroy((pthread_cond_t *)c); }
int cnd_signal(cnd_t *c) { return thrd_err(pthread_cond_signal((pthread_cond_t *)c)); }
int cnd_broadcast(cnd_t *c) { return thrd_err(pthread_cond_broadcast((pthread_cond_t *)c)); }

int cnd_wait(cnd_t *c, mtx_t *m)
{
    return thrd_err(pthread_cond_wait((pthread_cond_t *)c, (pthread_mutex_t *)m));
}

int cnd_timedwait(cnd_t *restrict c, mtx_t *restrict m, const struct timespec *restrict ts)
{
    return thrd_err(pthread_cond_timedwait((pthread_cond_t *)c, (pthread_mutex_t *)m, ts));
}

void call_once(once_flag *flag, void (*fn)(void)) { pthread_once((pthread_once_t *)flag, fn); }
