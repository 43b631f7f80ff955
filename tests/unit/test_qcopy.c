/* The producer's copy of a waiting room's line (producer/qcopy.h): it
 * answers a waiter of the pre-queue whose place has not been called, with
 * the position seckill_queue's ZCOUNT gives (the places after the last one
 * called, up to theirs) and the ETA from the same rate, and records the ask
 * as "ask_ms:eta_at_ms"; it answers nobody else (not in the copy, called
 * already), and nothing at all from a state too old, before the opening,
 * after the window, with no unit beyond the admissions outstanding, or
 * before the line is placed; another opening (a new seed) or sale drops
 * its line, and a line for another opening is not taken. The line takes
 * its places in order only, once each. */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

#include "qcopy.h"

#define ITEM 7
#define SEED 99
#define T0 1000000 /* the wall clock at the opening, ms */

static struct qc_state open_state(void)
{
    return (struct qc_state){ .starts_ms = T0, .ends_ms = T0 + 60000, .called = -1, .rate_milli = 2000,
                              .stock = 10, .outstanding = 0, .callable = 11, .placed = 1,
                              .seed_id = SEED };
}

/* A copy of ITEM whose line is users 1..4 at places 10, 20, 30, 40. */
static struct qcopy *copy_with_line(const struct qc_state *s)
{
    struct qcopy *v;
    char err[64];
    assert_int_equal(qc_new(&v, err, sizeof(err)), 0);
    assert_int_equal(qc_step(v, ITEM, s, 0), 0);
    struct qc_line *l = qc_line_new();
    for (int64_t u = 1; u <= 4; u++)
        assert_int_equal(qc_line_add(l, u, u * 10), 0);
    qc_set_line(v, ITEM, SEED, l);
    assert_true(qc_has_line(v, ITEM, SEED));
    return v;
}

static void test_line_in_order_once(void **state)
{
    (void)state;
    struct qc_line *l = qc_line_new();
    assert_int_equal(qc_line_last(l), -1);
    assert_int_equal(qc_line_add(l, 5, 100), 0);
    assert_int_equal(qc_line_add(l, 6, 100), 0); /* a tie */
    assert_int_equal(qc_line_add(l, 5, 100), 1); /* the next page's first: again */
    assert_int_equal(qc_line_add(l, 7, 99), -1); /* before the last */
    assert_int_equal(qc_line_size(l), 2);
    assert_int_equal(qc_line_last(l), 100);
    qc_line_free(l);
}

static void test_positions_and_eta(void **state)
{
    (void)state;
    struct qc_state s = open_state();
    struct qcopy *v = copy_with_line(&s);
    struct qc_answer a;
    assert_int_equal(qc_ask(v, ITEM, 3, 10, T0 + 5, &a), 1);
    assert_int_equal(a.position, 3);
    assert_int_equal(a.eta_ms, 1500); /* 3 places at 2 a second */
    assert_int_equal(a.starts_ms, T0);
    assert_int_equal(a.callable, 11);
    /* Places 10 and 20 called: 3 is next, 2 is for Redis to answer. */
    s.called = 20;
    s.rate_milli = 0;
    assert_int_equal(qc_step(v, ITEM, &s, 20), 0);
    assert_int_equal(qc_ask(v, ITEM, 3, 30, T0 + 6, &a), 1);
    assert_int_equal(a.position, 1);
    assert_int_equal(a.eta_ms, -1); /* no rate known */
    assert_int_equal(qc_ask(v, ITEM, 2, 30, T0 + 6, &a), 0);
    assert_int_equal(qc_ask(v, ITEM, 9, 30, T0 + 6, &a), 0);  /* not in the copy: a later joiner */
    assert_int_equal(qc_ask(v, ITEM + 1, 3, 30, T0 + 6, &a), 0); /* another item */
    /* The asks answered, as seckill_queue records them, then none. */
    struct qc_seen *seen = NULL;
    size_t cap = 0, n = qc_take_seen(v, &seen, &cap);
    assert_int_equal(n, 2);
    assert_int_equal(seen[0].item, ITEM);
    assert_int_equal(seen[0].user, 3);
    assert_int_equal(seen[0].at_ms, T0 + 5);
    assert_int_equal(seen[0].eta_at_ms, T0 + 5 + 1500);
    assert_int_equal(seen[1].eta_at_ms, 0);
    assert_int_equal(qc_take_seen(v, &seen, &cap), 0);
    free(seen);
    qc_free(v);
}

static void test_answers_nothing_unsure(void **state)
{
    (void)state;
    struct qc_state s = open_state();
    struct qcopy *v = copy_with_line(&s);
    struct qc_answer a;
    assert_int_equal(qc_ask(v, ITEM, 1, QC_FRESH_MS, T0, &a), 1);
    assert_int_equal(qc_ask(v, ITEM, 1, QC_FRESH_MS + 1, T0, &a), 0); /* too old */
    assert_int_equal(qc_ask(v, ITEM, 1, 0, T0 - 1, &a), 0);           /* before the opening */
    assert_int_equal(qc_ask(v, ITEM, 1, 0, T0 + 60000, &a), 0);       /* the window closed */
    s.outstanding = s.stock; /* every unit left has its admitted buyer */
    qc_step(v, ITEM, &s, 0);
    assert_int_equal(qc_ask(v, ITEM, 1, 0, T0, &a), 0);
    s.outstanding = 0;
    qc_step(v, ITEM, &s, 0);
    assert_int_equal(qc_ask(v, ITEM, 1, 0, T0, &a), 1);
    /* An opening lost and done again (another seed): the line is gone, and
     * one read for the old seed is not taken. */
    s.seed_id = SEED + 1;
    qc_step(v, ITEM, &s, 0);
    assert_false(qc_has_line(v, ITEM, SEED));
    assert_int_equal(qc_ask(v, ITEM, 1, 0, T0, &a), 0);
    struct qc_line *l = qc_line_new();
    assert_int_equal(qc_line_add(l, 1, 10), 0);
    qc_set_line(v, ITEM, SEED, l);
    assert_int_equal(qc_ask(v, ITEM, 1, 0, T0, &a), 0);
    /* Not placed (the opening lost, not yet redone): no line either. */
    s.seed_id = SEED;
    qc_step(v, ITEM, &s, 0);
    l = qc_line_new();
    assert_int_equal(qc_line_add(l, 1, 10), 0);
    qc_set_line(v, ITEM, SEED, l);
    assert_int_equal(qc_ask(v, ITEM, 1, 0, T0, &a), 1);
    s.placed = 0;
    qc_step(v, ITEM, &s, 0);
    assert_int_equal(qc_ask(v, ITEM, 1, 0, T0, &a), 0);
    /* Gone: nothing. */
    qc_forget(v, ITEM);
    assert_int_equal(qc_ask(v, ITEM, 1, 0, T0, &a), 0);
    qc_free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_line_in_order_once),
        cmocka_unit_test(test_positions_and_eta),
        cmocka_unit_test(test_answers_nothing_unsure),
    };
    harness_filter();
    return cmocka_run_group_tests_name("qcopy", tests, NULL, NULL);
}
