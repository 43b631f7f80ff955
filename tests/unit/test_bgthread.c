/* bgthread (common/base/bgthread.h): a stop reaches a thread wherever it
 * waits, a wake reaches a waiting thread, and waits are bounded. */
#include "harness.h"

#include <stdatomic.h>

#include "bgthread.h"

struct counter {
    struct bgthread t;
    int rounds; /* under t.mu */
    atomic_int returned;
};

/* Counts its rounds; waits with no limit between them. */
static void *wait_forever(void *arg)
{
    struct counter *c = arg;
    pthread_mutex_lock(&c->t.mu);
    while (!bgt_stopping(&c->t)) {
        c->rounds++;
        bgt_wait_ms(&c->t, -1);
    }
    pthread_mutex_unlock(&c->t.mu);
    atomic_store(&c->returned, 1);
    return NULL;
}

static int rounds_of(struct counter *c)
{
    pthread_mutex_lock(&c->t.mu);
    int n = c->rounds;
    pthread_mutex_unlock(&c->t.mu);
    return n;
}

/* Start fn on c and wait for its first round. */
static void start_counter(struct counter *c, void *(*fn)(void *))
{
    bool ok;
    assert_int_equal(bgt_start(&c->t, fn, c), 0);
    assert_true(c->t.running);
    WAIT_UNTIL(rounds_of(c) == 1, 5000, ok);
    assert_true(ok);
}

/* Stop c's thread: it must return at once, not when its wait would end. */
static void stop_counter(struct counter *c)
{
    int64_t t0 = util_mono_ms();
    bgt_stop(&c->t);
    assert_true(util_mono_ms() - t0 < 2000);
    assert_int_equal(atomic_load(&c->returned), 1);
    assert_false(c->t.running);
}

/* A thread in an untimed wait is woken by bgt_wake, and bgt_stop ends it. */
static void test_wake_and_stop(void **state)
{
    (void)state;
    struct counter c = { 0 };
    bool ok;
    start_counter(&c, wait_forever);
    assert_false(bgt_stopping(&c.t));
    pthread_mutex_lock(&c.t.mu);
    bgt_wake(&c.t);
    pthread_mutex_unlock(&c.t.mu);
    WAIT_UNTIL(rounds_of(&c) >= 2, 5000, ok);
    assert_true(ok);
    stop_counter(&c);
    bgt_stop(&c.t); /* a second stop: nothing */
}

/* Waits once for 30 s: the stop must cut it short. */
static void *wait_long(void *arg)
{
    struct counter *c = arg;
    pthread_mutex_lock(&c->t.mu);
    c->rounds++;
    bgt_wait_ms(&c->t, 30000);
    pthread_mutex_unlock(&c->t.mu);
    atomic_store(&c->returned, 1);
    return NULL;
}

static void test_stop_cuts_timed_wait(void **state)
{
    (void)state;
    struct counter c = { 0 };
    start_counter(&c, wait_long);
    stop_counter(&c);
}

/* A thread that naps between retries (bgt_sleep_ms) is stopped mid-nap. */
static void *nap_long(void *arg)
{
    struct counter *c = arg;
    while (!bgt_stopping(&c->t)) {
        pthread_mutex_lock(&c->t.mu);
        c->rounds++;
        pthread_mutex_unlock(&c->t.mu);
        bgt_sleep_ms(&c->t, 30000);
    }
    atomic_store(&c->returned, 1);
    return NULL;
}

static void test_stop_cuts_sleep(void **state)
{
    (void)state;
    struct counter c = { 0 };
    start_counter(&c, nap_long);
    stop_counter(&c);
    assert_int_equal(c.rounds, 1); /* joined: no lock needed (the stop freed it) */
}

/* Timed waits end by themselves: at the time asked, not before. */
static void *noop(void *arg)
{
    (void)arg;
    return NULL;
}

static void test_timed_waits_end(void **state)
{
    (void)state;
    struct bgthread t;
    assert_int_equal(bgt_start(&t, noop, NULL), 0);
    pthread_mutex_lock(&t.mu);
    int64_t t0 = util_mono_ms();
    /* A wait may end early (spurious wakeups): loop until the deadline. */
    while (util_mono_ms() < t0 + 50)
        bgt_wait_until(&t, t0 + 50);
    assert_true(util_mono_ms() - t0 >= 50);
    int64_t t1 = util_mono_ms();
    bgt_wait_ms(&t, 20);
    assert_true(util_mono_ms() - t1 < 5000);
    pthread_mutex_unlock(&t.mu);
    t1 = util_mono_ms();
    bgt_sleep_ms(&t, 40);
    assert_true(util_mono_ms() - t1 >= 40);
    bgt_stop(&t);
    /* After the stop a wait returns at once. */
    struct counter c = { 0 };
    assert_int_equal(bgt_start(&c.t, noop, NULL), 0);
    atomic_store(&c.t.stop, true);
    pthread_mutex_lock(&c.t.mu);
    t1 = util_mono_ms();
    bgt_wait_ms(&c.t, -1);
    bgt_wait_until(&c.t, INT64_MAX);
    pthread_mutex_unlock(&c.t.mu);
    bgt_sleep_ms(&c.t, 30000);
    assert_true(util_mono_ms() - t1 < 5000);
    bgt_stop(&c.t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wake_and_stop),
        cmocka_unit_test(test_stop_cuts_timed_wait),
        cmocka_unit_test(test_stop_cuts_sleep),
        cmocka_unit_test(test_timed_waits_end),
    };
    return cmocka_run_group_tests_name("bgthread", tests, NULL, NULL);
}
