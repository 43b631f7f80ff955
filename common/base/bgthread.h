/* bgthread: a background thread that its owner can wake and stop.
 *
 * bgt_start runs fn(arg) on a new thread; bgt_stop sets the stop flag, wakes
 * the thread and joins it. What the thread does, and when it checks the
 * flag, is the owner's: the flag only asks it to return. The owner may keep
 * its own state under the thread's mutex (mu), and queue work for it with a
 * push-and-signal (fifo_hand_over with mu and cv, fifo.h).
 *
 * Waits run on CLOCK_MONOTONIC (util_cond_init_mono), so a wall clock step
 * neither stretches nor cuts them; once the stop is set a wait returns at
 * once, so a thread that waits through these calls is never joined late.
 *
 * bgt_start and bgt_stop belong to the owner's thread; bgt_stopping may be
 * called from any thread, with or without mu; bgt_wake and the waits are
 * called with mu held. */
#ifndef SECKILL_BGTHREAD_H
#define SECKILL_BGTHREAD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct bgthread {
    pthread_mutex_t mu; /* the stop flag's; the owner may guard its own state with it */
    pthread_cond_t cv;  /* monotonic; signalled by bgt_wake and bgt_stop */
    atomic_bool stop;   /* set under mu, so a waiter checking it under mu never misses it */
    bool running;       /* started and not yet stopped */
    pthread_t thread;
};

/* Make t's mutex and condition variable, then run fn(arg) on a new thread.
 * 0, or -1 with errno set and nothing left to undo. t need not be zeroed. */
int bgt_start(struct bgthread *t, void *(*fn)(void *), void *arg);
/* Ask the thread to stop, wake it, wait for it to return, and free the
 * mutex and condition variable. Nothing for a thread that is not running
 * (zeroed and never started, its start failed, or stopped already). */
void bgt_stop(struct bgthread *t);
/* True once bgt_stop was called. */
bool bgt_stopping(struct bgthread *t);
/* With mu held: wake the thread from its wait. */
void bgt_wake(struct bgthread *t);
/* With mu held: wait for a wake or a stop, at most ms milliseconds (ms < 0:
 * no limit); at once when stopping. It may also return early (spurious
 * wakeups): the caller looks at its state again. */
void bgt_wait_ms(struct bgthread *t, int64_t ms);
/* The same, until the CLOCK_MONOTONIC time at_ms (util_mono_ms's scale);
 * INT64_MAX: no limit. */
void bgt_wait_until(struct bgthread *t, int64_t at_ms);
/* Without mu: sleep ms milliseconds, or until the stop, for a thread that
 * waits on nothing else (a retry's backoff). */
void bgt_sleep_ms(struct bgthread *t, int64_t ms);

#endif
