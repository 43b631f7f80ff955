/* The consumer's settlement outcomes are declared once (CMSG_OUTCOMES in
 * consumer/queue.h); what cannot be derived from that table is checked
 * against it here: the CHECK list of order_rejections.reason, and the
 * rejection counters' reason labels; and the buyers' cancels' outcomes and
 * counters, and which messages wait for the next batch after a cancel
 * (wk_must_wait, consumer/worker.h). */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmetrics.h"
#include "queue.h"
#include "worker.h"

#define MAX_WORDS 32
#define MIGRATION "sql/migrations/004_order_rejections.sql"

static void test_check_list_is_the_table(void **state)
{
    (void)state;
    char *words[MAX_WORDS];
    const char *reasons[MAX_WORDS];
    size_t nwords, nreasons = 0;
    char *sql;

    sql = harness_slurp(MIGRATION);
    nwords = harness_quoted_list(sql, "CHECK (reason IN (", "CHECK (reason IN (", words, MAX_WORDS);
    for (int o = 0; o < CMSG_NOUTCOMES; o++)
        if (cmsg_reason(o))
            reasons[nreasons++] = cmsg_reason(o);
    assert_true(nreasons > 0);
    assert_int_equal(nwords, nreasons);
    /* Same sizes and every reason in the list, no word twice: the same set. */
    for (size_t i = 0; i < nreasons; i++) {
        size_t seen = 0;
        for (size_t j = 0; j < nwords; j++)
            seen += strcmp(words[j], reasons[i]) == 0;
        if (seen != 1)
            fail_msg("reason '%s' appears %zu times in the CHECK list of %s", reasons[i], seen, MIGRATION);
    }
    free(sql);
}

/* The columns of one row agree: a refusal has a reason and the refused status;
 * so has an order refused before (REFUSED_BEFORE: 'r', its reason the one
 * it was refused for then), which is no new refusal to record. */
static void test_columns_agree(void **state)
{
    (void)state;
    for (int o = 0; o < CMSG_NOUTCOMES; o++) {
        bool refusal = cmsg_is_refusal(o);
        assert_int_equal(refusal, cmsg_reason(o) != NULL);
        assert_int_equal(refusal || o == CMSG_REFUSED_BEFORE, cmsg_status(o) == OST_REFUSED);
        /* The word a refusal is recorded under leads back to it. */
        if (refusal)
            assert_int_equal(cmsg_of_reason(cmsg_reason(o)), o);
    }
    assert_false(cmsg_is_refusal(CMSG_REFUSED_BEFORE));
    assert_int_equal(cmsg_of_reason("no such reason"), CMSG_PENDING);
    assert_int_equal(cmsg_of_reason(NULL), CMSG_PENDING);
    struct cmsg m = { .outcome = CMSG_REFUSED_BEFORE, .refused_as = CMSG_NO_STOCK };
    assert_string_equal(cmsg_refusal_reason(&m), "no_stock");
    m = (struct cmsg){ .outcome = CMSG_DUP_BUYER };
    assert_string_equal(cmsg_refusal_reason(&m), "dup_buyer");
    m = (struct cmsg){ .outcome = CMSG_DUPLICATE };
    assert_null(cmsg_refusal_reason(&m));
    assert_int_equal(cmsg_status(CMSG_INSERTED), OST_CONFIRMED);
    assert_int_equal(cmsg_status(CMSG_DUPLICATE), OST_CONFIRMED);
    assert_int_equal(cmsg_status(CMSG_RETRY), OST_NONE);
    /* A cancel never reaches seckill_settle, and refuses nothing. */
    assert_int_equal(cmsg_status(CMSG_CANCELLED), OST_NONE);
    assert_int_equal(cmsg_status(CMSG_CANCEL_NOOP), OST_NONE);
    assert_false(cmsg_is_refusal(CMSG_CANCELLED));
    assert_false(cmsg_is_refusal(CMSG_CANCEL_NOOP));
    assert_null(cmsg_reason(CMSG_CANCELLED));
    assert_null(cmsg_reason(CMSG_CANCEL_NOOP));
    assert_false(cmsg_is_refusal(CMSG_PENDING));
    /* Out of range: nothing, not a neighbour's row. */
    assert_null(cmsg_reason(-1));
    assert_null(cmsg_reason(CMSG_NOUTCOMES));
    assert_false(cmsg_is_refusal(CMSG_NOUTCOMES));
    assert_int_equal(cmsg_status(CMSG_NOUTCOMES), OST_NONE);
}

/* Each refusal's counter is seckill_consumer_rejected_total{reason="<its reason>"}. */
static void test_rejection_labels(void **state)
{
    (void)state;
    for (int o = 0; o < CMSG_NOUTCOMES; o++) {
        _Atomic int64_t *c = cm_outcome_counter(o);
        const char *name = NULL, *labels = NULL;
        char want[64];
        if (!cmsg_is_refusal(o))
            continue;
        assert_non_null(c);
#define FIND(m, n, l, type, help)                                                                  \
    if (c == &cm.m) {                                                                              \
        name = n;                                                                                  \
        labels = l;                                                                                \
    }
        CM_METRICS(FIND)
#undef FIND
        assert_non_null(name);
        assert_string_equal(name, "seckill_consumer_rejected_total");
        snprintf(want, sizeof(want), "reason=\"%s\"", cmsg_reason(o));
        assert_string_equal(labels, want);
    }
}

/* Counting an outcome bumps its own counter and no other. */
static void test_count_outcome(void **state)
{
    (void)state;
    cm_init();
    assert_non_null(cm_outcome_counter(CMSG_INSERTED));
    assert_null(cm_outcome_counter(CMSG_RETRY));
    for (int o = 0; o < CMSG_NOUTCOMES; o++) {
        _Atomic int64_t *c = cm_outcome_counter(o);
        int64_t before = c ? atomic_load(c) : 0;
        int64_t persisted = CM_GET(persisted);
        cm_count_outcome(o);
        if (c)
            assert_int_equal(atomic_load(c), before + 1);
        if (c != &cm.persisted)
            assert_int_equal(CM_GET(persisted), persisted);
    }
    assert_int_equal(CM_GET(persisted), 1);
    /* An order refused before is counted as a duplicate (issue #55). */
    assert_int_equal(CM_GET(duplicates), 2);
    assert_int_equal(CM_GET(rej_no_stock), 1);
    assert_int_equal(CM_GET(cancels_applied), 1);
    assert_int_equal(CM_GET(cancels_noop), 1);
    assert_int_equal(CM_GET(dead_lettered), 0);
}

/* The cancels' counters: one family, seckill_consumer_cancels_total, by
 * result; no other outcome bumps them. */
static void test_cancel_counters(void **state)
{
    (void)state;
    static const struct {
        int outcome;
        const char *labels;
    } want[] = { { CMSG_CANCELLED, "result=\"applied\"" }, { CMSG_CANCEL_NOOP, "result=\"noop\"" } };
    for (size_t i = 0; i < ARRAY_SIZE(want); i++) {
        _Atomic int64_t *c = cm_outcome_counter(want[i].outcome);
        const char *name = NULL, *labels = NULL;
        assert_non_null(c);
#define FIND(m, n, l, type, help)                                                                  \
    if (c == &cm.m) {                                                                              \
        name = n;                                                                                  \
        labels = l;                                                                                \
    }
        CM_METRICS(FIND)
#undef FIND
        assert_non_null(name);
        assert_string_equal(name, "seckill_consumer_cancels_total");
        assert_string_equal(labels, want[i].labels);
    }
    for (int o = 0; o < CMSG_NOUTCOMES; o++)
        if (o != CMSG_CANCELLED && o != CMSG_CANCEL_NOOP) {
            assert_ptr_not_equal(cm_outcome_counter(o), &cm.cancels_applied);
            assert_ptr_not_equal(cm_outcome_counter(o), &cm.cancels_noop);
        }
}

/* After a cancel in a batch: every later message of its user, and every
 * later order (not cancel) of its item, waits for the next batch; the rest
 * goes. */
static void test_must_wait(void **state)
{
    (void)state;
    /* is_cancel, user_held, item_cancelled */
    assert_false(wk_must_wait(false, false, false)); /* an order of another user and item */
    assert_false(wk_must_wait(true, false, false));  /* a cancel of another user and item */
    assert_false(wk_must_wait(true, false, true));   /* another cancel of the item */
    assert_true(wk_must_wait(false, false, true));   /* an order of the item: may need the unit */
    assert_true(wk_must_wait(false, true, false));   /* the user's next order */
    assert_true(wk_must_wait(true, true, false));    /* the user's next cancel */
    assert_true(wk_must_wait(true, true, true));
    assert_true(wk_must_wait(false, true, true));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_list_is_the_table),
        cmocka_unit_test(test_columns_agree),
        cmocka_unit_test(test_rejection_labels),
        cmocka_unit_test(test_count_outcome),
        cmocka_unit_test(test_cancel_counters),
        cmocka_unit_test(test_must_wait),
    };
    return cmocka_run_group_tests_name("outcomes", tests, NULL, NULL);
}
