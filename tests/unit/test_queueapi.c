/* The waiting room's answers as docs/api.md tells buyers them, held against
 * the code both ways: every answer of the queue calls (WR_STATES,
 * producer/wroom.h) is a row of the doc's table with its HTTP status, and
 * every row of that table is an answer the code gives with that status;
 * every reason a buy's admission is refused for (ADM_REASONS,
 * common/sale/admtoken.h) is a row of the reasons' table, and that table
 * has no other. Then poll_after_s, as the doc promises it: just after the
 * opening (spread) for those who wait for it, three quarters of the ETA for
 * the placed, within [WR_POLL_MIN_MS, a third of the abandonment time]. */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admitter.h"
#include "admtoken.h"
#include "wroom.h"

/* The rows of the table whose header line is header, after its |---|
 * line: each row's first two cells (the backticks of the first dropped)
 * into word[i] and second[i]. Their count; fails when there is no such
 * table. */
static int table_rows(const char *md, const char *header, char word[][48], char second[][48], int max)
{
    const char *p = strstr(md, header);
    int n = 0;
    if (!p)
        fail_msg("docs/api.md has no table headed '%s'", header);
    p = strchr(p, '\n');
    p = p ? strchr(p + 1, '\n') : NULL; /* past the |---| line */
    while (p && p[1] == '|' && n < max) {
        const char *a = p + 2, *b = strchr(a, '|'), *c = b ? strchr(b + 1, '|') : NULL;
        if (!b || !c)
            break;
        if (sscanf(a, " `%47[a-z_]`", word[n]) != 1)
            fail_msg("docs/api.md: a row under '%s' without a `word` first: %.60s", header, a);
        while (*++b == ' ')
            ;
        snprintf(second[n], 48, "%.*s", (int)(c - b), b);
        n++;
        p = strchr(p + 1, '\n');
    }
    return n;
}

static const struct {
    unsigned http;
    const char *word;
} states[] = {
#define ROW(name, http, word) { http, word },
    WR_STATES(ROW)
#undef ROW
};

/* Every answer of the queue calls has its row, with its status; every row is
 * an answer. */
static void test_queue_answers(void **state)
{
    (void)state;
    char *md = harness_slurp("docs/api.md"), word[32][48], http[32][48];
    int n = table_rows(md, "| answer | HTTP | body | when | what the buyer does |", word, http, 32);
    for (size_t s = 0; s < ARRAY_SIZE(states); s++) {
        bool found = false;
        for (int i = 0; i < n && !found; i++)
            if (strcmp(word[i], states[s].word) == 0) {
                found = true;
                if ((unsigned)atoi(http[i]) != states[s].http)
                    fail_msg("docs/api.md says '%s' is answered %s; the code answers %u", word[i], http[i],
                             states[s].http);
            }
        if (!found)
            fail_msg("docs/api.md has no row for the queue's answer '%s'", states[s].word);
        /* and the code's own lookups agree with the table */
        assert_int_equal(wr_http_status((enum wr_state)s), states[s].http);
        assert_string_equal(wr_word((enum wr_state)s), states[s].word);
    }
    /* each state's row found, and no other row: an answer the code never gives */
    assert_int_equal(n, (int)ARRAY_SIZE(states));
    free(md);
}

/* Every reason a buy's admission is refused for has its row, and only they. */
static void test_refusal_reasons(void **state)
{
    (void)state;
    char *md = harness_slurp("docs/api.md"), word[32][48], by[32][48];
    int n = table_rows(md, "| reason | decided by | when |", word, by, 32);
    for (int r = ADM_OK + 1; r < ADM_NREASONS; r++) {
        bool found = false;
        for (int i = 0; i < n && !found; i++)
            found = strcmp(word[i], adm_reason_word((enum adm_reason)r)) == 0;
        if (!found)
            fail_msg("docs/api.md has no row for the admission refusal '%s'",
                     adm_reason_word((enum adm_reason)r));
    }
    assert_int_equal(n, ADM_NREASONS - 1); /* all but ADM_OK, and no other */
    /* The buy's table of answers names the 403 they come in. */
    assert_non_null(strstr(md, "| 403 | `{\"status\":\"admission_refused\",\"reason\":\"…\"}` |"));
    free(md);
}

/* poll_after_s as the doc says: before the opening, just after it plus the
 * spread; with a place, three quarters of the ETA; within
 * [WR_POLL_MIN_MS, abandon/3]. */
static void test_poll_after(void **state)
{
    (void)state;
    /* Before the opening: at the opening's step, plus the caller's jitter. */
    assert_int_equal(wr_poll_after_ms(0, -1, 4000, 30, 0, -1), 4000 + ADT_TICK_MS);
    assert_int_equal(wr_poll_after_ms(0, -1, 4000, 30, 700, -1), 4000 + ADT_TICK_MS + 700);
    /* Far before it: a third of the abandonment time, to keep the place. */
    assert_int_equal(wr_poll_after_ms(0, -1, 600000, 30, 0, -1), 10000);
    /* After it, not placed yet. */
    assert_int_equal(wr_poll_after_ms(0, -1, -200, 30, 0, -1), WR_POLL_UNPLACED_MS);
    /* A place: three quarters of the ETA, at least the minimum. */
    assert_int_equal(wr_poll_after_ms(3120, 2000, -5000, 30, 0, -1), 1500);
    assert_int_equal(wr_poll_after_ms(7, 100, -5000, 30, 0, -1), WR_POLL_MIN_MS);
    assert_int_equal(wr_poll_after_ms(90000, 600000, -5000, 30, 0, -1), 10000);
    assert_int_equal(wr_poll_after_ms(12, -1, -5000, 30, 0, -1), WR_POLL_UNKNOWN_MS);
    /* Behind more waiters than units free: as late as the place allows;
     * within them, the ETA's. */
    assert_int_equal(wr_poll_after_ms(3120, 2000, -5000, 30, 0, 3119), 10000);
    assert_int_equal(wr_poll_after_ms(3120, 2000, -5000, 30, 0, 3120), 1500);
    /* A third of a short abandonment time still bounds every answer, but
     * never below the minimum. */
    assert_int_equal(wr_poll_after_ms(0, -1, 4000, 3, 0, -1), 1000);
    assert_int_equal(wr_poll_after_ms(12, 9000, -1, 0, 0, -1), WR_POLL_MIN_MS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queue_answers),
        cmocka_unit_test(test_refusal_reasons),
        cmocka_unit_test(test_poll_after),
    };
    harness_filter();
    return cmocka_run_group_tests_name("queueapi", tests, NULL, NULL);
}
