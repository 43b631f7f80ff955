/* The per-partition offset watermark (consumer/offsets.c): workers settle
 * out of order, and only the offset past a contiguous settled prefix may
 * ever be stored. */
#include "harness.h"

#include "offsets.h"

static struct off_table *open_table(void)
{
    struct off_table *t = NULL;
    assert_int_equal(off_open(&t), 0);
    assert_non_null(t);
    return t;
}

/* Track offsets [from, to) of p; each carries the epoch returned. */
static void track_range(struct off_table *t, int32_t p, int64_t from, int64_t to, uint32_t want_epoch)
{
    for (int64_t o = from; o < to; o++) {
        uint32_t e = 0;
        assert_int_equal(off_track(t, p, o, &e), 0);
        assert_int_equal(e, want_epoch);
    }
}

static void test_in_order(void **state)
{
    (void)state;
    struct off_table *t = open_table();
    uint32_t e;
    int64_t next = -1;
    assert_int_equal(off_assign(t, 0, &e), 0);
    /* Nothing settled: nothing to store. */
    assert_int_equal(off_advance(t, 0, &next), 0);
    track_range(t, 0, 100, 103, e);
    assert_int_equal(off_inflight(t, 0), 3);
    assert_int_equal(off_done(t, 0, e, 100), 0);
    assert_int_equal(off_advance(t, 0, &next), 1);
    assert_int_equal(next, 101); /* the next offset to consume */
    /* Reported once: no movement, nothing new. */
    assert_int_equal(off_advance(t, 0, &next), 0);
    assert_int_equal(off_done(t, 0, e, 101), 0);
    assert_int_equal(off_done(t, 0, e, 102), 0);
    assert_int_equal(off_advance(t, 0, &next), 1);
    assert_int_equal(next, 103);
    assert_int_equal(off_inflight(t, 0), 0);
    assert_int_equal(off_pending(t), 0);
    off_close(t);
}

/* Later offsets settled first hold the watermark until the gap closes, and
 * then it jumps over all of them at once. */
static void test_out_of_order_waits_for_the_gap(void **state)
{
    (void)state;
    struct off_table *t = open_table();
    uint32_t e;
    int64_t next = -1;
    assert_int_equal(off_assign(t, 3, &e), 0);
    track_range(t, 3, 10, 15, e);
    assert_int_equal(off_done(t, 3, e, 12), 0);
    assert_int_equal(off_done(t, 3, e, 14), 0);
    assert_int_equal(off_done(t, 3, e, 11), 0);
    assert_int_equal(off_advance(t, 3, &next), 0); /* 10 still open */
    assert_int_equal(off_inflight(t, 3), 5);
    assert_int_equal(off_done(t, 3, e, 10), 0);
    assert_int_equal(off_advance(t, 3, &next), 1);
    assert_int_equal(next, 13); /* 13 open: not past it, whatever 14 says */
    assert_int_equal(off_inflight(t, 3), 2);
    assert_int_equal(off_done(t, 3, e, 13), 0);
    assert_int_equal(off_advance(t, 3, &next), 1);
    assert_int_equal(next, 15);
    off_close(t);
}

/* Offsets need not be contiguous (compaction, transactions' markers): the
 * watermark is the one after the last settled. */
static void test_sparse_offsets(void **state)
{
    (void)state;
    struct off_table *t = open_table();
    uint32_t e, e2;
    int64_t next = -1;
    assert_int_equal(off_assign(t, 0, &e), 0);
    assert_int_equal(off_track(t, 0, 5, &e2), 0);
    assert_int_equal(off_track(t, 0, 9, &e2), 0);
    assert_int_equal(off_track(t, 0, 20, &e2), 0);
    assert_int_equal(off_done(t, 0, e, 9), 0);
    assert_int_equal(off_done(t, 0, e, 7), 1); /* never tracked */
    assert_int_equal(off_advance(t, 0, &next), 0);
    assert_int_equal(off_done(t, 0, e, 5), 0);
    assert_int_equal(off_advance(t, 0, &next), 1);
    assert_int_equal(next, 10);
    off_close(t);
}

/* A completion from before a revoke or a new assignment is stale: it must
 * neither count nor move the new assignment's watermark. */
static void test_epochs(void **state)
{
    (void)state;
    struct off_table *t = open_table();
    uint32_t e1, e2;
    int64_t next = -1;
    assert_int_equal(off_assign(t, 1, &e1), 0);
    track_range(t, 1, 0, 3, e1);
    assert_int_equal(off_pending(t), 3);
    off_revoke(t, 1);
    assert_false(off_assigned(t, 1));
    assert_int_equal(off_pending(t), 0);
    assert_int_equal(off_inflight(t, 1), 0);
    /* Revoked: nothing tracked, completions stale, nothing to store. */
    uint32_t ignored;
    assert_int_equal(off_track(t, 1, 3, &ignored), -1);
    assert_int_equal(off_done(t, 1, e1, 0), 1);
    assert_int_equal(off_advance(t, 1, &next), 0);

    assert_int_equal(off_assign(t, 1, &e2), 0);
    assert_true(e2 != e1);
    assert_true(off_assigned(t, 1));
    track_range(t, 1, 0, 2, e2);
    /* The old epoch's completion of an offset the new one also tracks. */
    assert_int_equal(off_done(t, 1, e1, 0), 1);
    assert_int_equal(off_advance(t, 1, &next), 0);
    assert_int_equal(off_inflight(t, 1), 2);
    assert_int_equal(off_done(t, 1, e2, 0), 0);
    assert_int_equal(off_advance(t, 1, &next), 1);
    assert_int_equal(next, 1);
    off_close(t);
}

/* Re-assigning without a revoke (a lost partition given back) starts afresh
 * too: the old in-flight messages stop counting as pending. */
static void test_reassign_drops_inflight(void **state)
{
    (void)state;
    struct off_table *t = open_table();
    uint32_t e1, e2;
    int64_t next = -1;
    assert_int_equal(off_assign(t, 0, &e1), 0);
    track_range(t, 0, 50, 54, e1);
    assert_int_equal(off_done(t, 0, e1, 50), 0);
    assert_int_equal(off_pending(t), 3);
    assert_int_equal(off_assign(t, 0, &e2), 0);
    assert_true(e2 != e1);
    assert_int_equal(off_pending(t), 0);
    /* The earlier assignment's watermark is not reported for the new one. */
    assert_int_equal(off_advance(t, 0, &next), 0);
    off_close(t);
}

/* Partitions are independent; unknown ones are refused, not grown. */
static void test_partitions_independent(void **state)
{
    (void)state;
    struct off_table *t = open_table();
    uint32_t e0, e5, e;
    int64_t next = -1;
    assert_int_equal(off_track(t, 0, 1, &e), -1); /* never assigned */
    assert_int_equal(off_assign(t, -1, &e), -1);
    assert_int_equal(off_assign(t, 0, &e0), 0);
    assert_int_equal(off_assign(t, 5, &e5), 0);
    assert_int_equal(off_partitions(t), 6);
    assert_false(off_assigned(t, 3));
    track_range(t, 0, 0, 2, e0);
    track_range(t, 5, 100, 102, e5);
    assert_int_equal(off_pending(t), 4);
    assert_int_equal(off_done(t, 5, e5, 100), 0);
    assert_int_equal(off_advance(t, 0, &next), 0);
    assert_int_equal(off_advance(t, 5, &next), 1);
    assert_int_equal(next, 101);
    /* Partition 0's offset 100 does not exist there. */
    assert_int_equal(off_done(t, 0, e0, 100), 1);
    assert_int_equal(off_done(t, 7, e0, 0), 1);
    assert_int_equal(off_pending(t), 3);
    off_close(t);
}

/* Past the ring's first capacity, and with its head wrapped around, the
 * order of offsets survives the growth. */
static void test_ring_growth(void **state)
{
    (void)state;
    enum { N = 5000 };
    struct off_table *t = open_table();
    uint32_t e;
    int64_t next = -1;
    assert_int_equal(off_assign(t, 0, &e), 0);
    track_range(t, 0, 0, 600, e);
    for (int64_t o = 0; o < 500; o++)
        assert_int_equal(off_done(t, 0, e, o), 0);
    /* head is now mid-ring: grow while wrapped */
    track_range(t, 0, 600, N, e);
    assert_int_equal(off_inflight(t, 0), N - 500);
    /* settle the rest from the top down: the watermark waits for 500 */
    for (int64_t o = N - 1; o > 500; o--)
        assert_int_equal(off_done(t, 0, e, o), 0);
    assert_int_equal(off_advance(t, 0, &next), 1);
    assert_int_equal(next, 500);
    assert_int_equal(off_advance(t, 0, &next), 0);
    assert_int_equal(off_done(t, 0, e, 500), 0);
    assert_int_equal(off_advance(t, 0, &next), 1);
    assert_int_equal(next, N);
    assert_int_equal(off_pending(t), 0);
    off_close(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_in_order),
        cmocka_unit_test(test_out_of_order_waits_for_the_gap),
        cmocka_unit_test(test_sparse_offsets),
        cmocka_unit_test(test_epochs),
        cmocka_unit_test(test_reassign_drops_inflight),
        cmocka_unit_test(test_partitions_independent),
        cmocka_unit_test(test_ring_growth),
    };
    return cmocka_run_group_tests_name("offsets", tests, NULL, NULL);
}
