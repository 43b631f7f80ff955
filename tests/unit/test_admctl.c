/* The waiting room's admission rate (producer/admctl.h): it starts at the
 * ceiling, steps down multiplicatively while the accepted p99 is over its
 * target or the backlog over its bound, never below the floor, climbs back
 * additively while both hold, never over the ceiling, and a lowered ceiling
 * binds at once; no p99 (too few buys to say) is no objection; whether it
 * is held at its floor (the gauge SeckillAdmissionAtFloor reads). And the
 * p99 it is fed (metrics_hist_quantile_us): what was observed between two
 * snapshots, interpolated in its bucket. */
#include "harness.h"

#include <string.h>

#include "admctl.h"
#include "metrics.h"

static struct actl_in calm(double ceiling)
{
    return (struct actl_in){ .ceiling_per_s = ceiling, .p99_us = 2000, .target_us = 15000, .backlog = 10,
                             .backlog_max = 5000 };
}

static void test_starts_at_the_ceiling(void **state)
{
    (void)state;
    struct actl a = { 0 };
    struct actl_in in = calm(2000);
    assert_false(actl_at_floor(&a, 2000)); /* not started */
    assert_int_equal(actl_step(&a, &in), ACTL_HOLD);
    assert_true(a.rate_per_s == 2000);
    assert_false(actl_at_floor(&a, 2000));
}

static void test_down_on_p99_then_up(void **state)
{
    (void)state;
    struct actl a = { 0 };
    struct actl_in in = calm(1000);
    actl_step(&a, &in);
    in.p99_us = 40000; /* over the 15 ms target */
    assert_int_equal(actl_step(&a, &in), ACTL_DOWN);
    assert_true(a.rate_per_s == 1000 * ACTL_DOWN_FACTOR);
    assert_int_equal(actl_step(&a, &in), ACTL_DOWN);
    assert_true(a.rate_per_s == 1000 * ACTL_DOWN_FACTOR * ACTL_DOWN_FACTOR);
    /* Held down long enough, it stops at the floor, never at 0. */
    for (int i = 0; i < 100; i++)
        actl_step(&a, &in);
    assert_true(a.rate_per_s == actl_floor(1000));
    assert_true(a.rate_per_s >= 1);
    assert_int_equal(actl_step(&a, &in), ACTL_HOLD);
    assert_true(actl_at_floor(&a, 1000));
    /* The p99 back under the target: additive steps up to the ceiling. */
    in.p99_us = 5000;
    assert_int_equal(actl_step(&a, &in), ACTL_UP);
    assert_false(actl_at_floor(&a, 1000));
    assert_true(a.rate_per_s == actl_floor(1000) + 1000 * ACTL_UP_SHARE);
    for (int i = 0; i < 100; i++)
        actl_step(&a, &in);
    assert_true(a.rate_per_s == 1000);
    assert_int_equal(actl_step(&a, &in), ACTL_HOLD);
}

static void test_down_on_backlog(void **state)
{
    (void)state;
    struct actl a = { .rate_per_s = 500 };
    struct actl_in in = calm(500);
    in.backlog = 5001;
    assert_int_equal(actl_step(&a, &in), ACTL_DOWN);
    in.backlog = 5000; /* at the bound: holds */
    assert_int_equal(actl_step(&a, &in), ACTL_UP);
}

static void test_no_p99_is_no_objection(void **state)
{
    (void)state;
    struct actl a = { .rate_per_s = 100 };
    struct actl_in in = calm(1000);
    in.p99_us = -1;
    assert_int_equal(actl_step(&a, &in), ACTL_UP);
}

static void test_ceiling_lowered_binds(void **state)
{
    (void)state;
    struct actl a = { .rate_per_s = 2000 };
    struct actl_in in = calm(300);
    actl_step(&a, &in);
    assert_true(a.rate_per_s == 300);
    /* A ceiling of 1/s has a floor of 1/s. */
    in = calm(1);
    in.p99_us = 99999;
    actl_step(&a, &in);
    assert_true(a.rate_per_s == 1);
    assert_true(actl_at_floor(&a, 1));
    /* A ceiling raised again: the rate is below its floor until the next step. */
    assert_true(actl_at_floor(&a, 1000));
}

static void test_quantile(void **state)
{
    (void)state;
    struct metrics_hist h;
    struct metrics_hist_snap a, b;
    memset(&h, 0, sizeof(h));
    metrics_hist_snapshot(&h, &a);
    for (int i = 0; i < 10; i++)
        metrics_hist_observe_us(&h, 50); /* the 100 us bucket */
    metrics_hist_snapshot(&h, &b);
    /* Fewer than asked for: nothing to say. */
    assert_int_equal(metrics_hist_quantile_us(&a, &b, 0.99, 20), -1);
    assert_int_equal(metrics_hist_quantile_us(&a, &a, 0.99, 0), -1);
    /* 10 in (0, 100]: the 0.99 quantile is 99 us into it. */
    assert_int_equal(metrics_hist_quantile_us(&a, &b, 0.99, 10), 99);
    /* 90 fast, 10 in (10, 25] ms: the 0.99 quantile is in the slow bucket,
     * and only what came after the first snapshot counts. */
    a = b;
    for (int i = 0; i < 90; i++)
        metrics_hist_observe_us(&h, 800);
    for (int i = 0; i < 10; i++)
        metrics_hist_observe_us(&h, 20000);
    metrics_hist_snapshot(&h, &b);
    int64_t p99 = metrics_hist_quantile_us(&a, &b, 0.99, 20);
    assert_true(p99 > 10000 && p99 <= 25000);
    assert_int_equal(metrics_hist_count(&a, &b), 100);
    /* the median: 50 of the 90 in (500, 1000] us */
    assert_int_equal(metrics_hist_quantile_us(&a, &b, 0.5, 20), 500 + 500 * 50 / 90);
    /* Beyond the last bound: the last bound. */
    a = b;
    for (int i = 0; i < 30; i++)
        metrics_hist_observe_us(&h, 60000000);
    metrics_hist_snapshot(&h, &b);
    assert_int_equal(metrics_hist_quantile_us(&a, &b, 0.99, 20), 10000000);
}

/* A slow p99 while the admitted have mostly not bought yet (the crowd's
 * asks come first at the opening) is no objection: admitting fewer would
 * not speed those few buys up. Once the buys keep up with the admissions,
 * it objects again; the backlog objects either way. */
static void test_p99_of_few_buys_after_many_admissions(void **state)
{
    (void)state;
    struct actl a = { 0 };
    struct actl_in in = calm(1000);
    in.p99_us = 40000;
    in.admitted = 500;
    in.buys = 200;
    assert_int_equal(actl_step(&a, &in), ACTL_HOLD); /* started at the ceiling: no lower */
    assert_true(a.rate_per_s == 1000);
    in.buys = 250; /* half the admissions: the sale is running, and slow */
    assert_int_equal(actl_step(&a, &in), ACTL_DOWN);
    assert_true(a.rate_per_s == 1000 * ACTL_DOWN_FACTOR);
    in.buys = 0;
    in.backlog = in.backlog_max + 1;
    assert_int_equal(actl_step(&a, &in), ACTL_DOWN);
}

/* The measured rate reads the rate from its first steps (an average that
 * started at 0 would read a third of it after 2 s of a 5 s window), and
 * nothing before it has been measured for long enough. */
static void test_measured_rate_from_the_start(void **state)
{
    (void)state;
    struct actl_avg v = { 0 };
    for (int i = 0; i < 19; i++)
        actl_avg_add(&v, 6000, 100, 5000);
    assert_true(actl_avg_rate(&v, 2000) < 0);
    actl_avg_add(&v, 6000, 100, 5000);
    double r = actl_avg_rate(&v, 2000);
    assert_true(r > 5999 && r < 6001);
    /* It follows a change at the window's pace, not at once. */
    for (int i = 0; i < 10; i++)
        actl_avg_add(&v, 2000, 100, 5000);
    r = actl_avg_rate(&v, 2000);
    assert_true(r < 6000 && r > 4000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_starts_at_the_ceiling), cmocka_unit_test(test_down_on_p99_then_up),
        cmocka_unit_test(test_down_on_backlog),       cmocka_unit_test(test_no_p99_is_no_objection),
        cmocka_unit_test(test_ceiling_lowered_binds), cmocka_unit_test(test_quantile),
        cmocka_unit_test(test_p99_of_few_buys_after_many_admissions),
        cmocka_unit_test(test_measured_rate_from_the_start),
    };
    harness_filter();
    return cmocka_run_group_tests_name("admctl", tests, NULL, NULL);
}
