/* The states of an order are declared once (OST_STATES in
 * common/sale/ostate.h); what spells them elsewhere is held against that
 * table here, without a stack: the CHECK lists of migration 008
 * (orders.status, order_returns.reason), the Lua that writes and compares
 * the letters, the rebuild's SQL (ctl/sql/item_states.sql), the JSON words
 * of docs/api.md and the consumer's settlement outcomes (CMSG_OUTCOMES).
 * Then the codec of the orders hash's value, every state and what it
 * refuses. */
#include "harness.h"

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ostate.h"
#include "queue.h"

#define MAX_WORDS 32

/* words[0..n) hold each of want[0..m) once, and nothing else. */
static void same_set(char **words, size_t n, const char *const *want, size_t m, const char *what)
{
    if (n != m)
        fail_msg("%s: %zu words, the table has %zu", what, n, m);
    for (size_t i = 0; i < m; i++) {
        size_t seen = 0;
        for (size_t j = 0; j < n; j++)
            seen += strcmp(words[j], want[i]) == 0;
        if (seen != 1)
            fail_msg("%s: '%s' appears %zu times", what, want[i], seen);
    }
}

/* --- the table alone --------------------------------------------------------- */

static void test_columns(void **state)
{
    (void)state;
    assert_true(OST_NSTATES == 7);
    for (int s = 0; s < OST_NSTATES; s++) {
        char l = ost_letter(s);
        const char *pg = ost_pg_word(s), *json = ost_json_word(s);
        assert_true(l >= 'a' && l <= 'z');
        /* Each column leads back to its state: no letter or word twice. */
        assert_int_equal(ost_of_letter(l), s);
        if (pg)
            assert_int_equal(ost_of_pg_word(pg), s);
        assert_non_null(json);
        for (int t = 0; t < s; t++)
            assert_string_not_equal(ost_json_word(t), json);
        /* Only a settled order has a reason; every mark carries a time. */
        assert_int_equal(ost_detail(s) == OST_DETAIL_REASON, s == OST_REFUSED);
        assert_int_equal(ost_detail(s) == OST_DETAIL_MS, ost_writer(s) == OST_BY_MARK);
    }
    assert_int_equal(ost_of_letter('z'), OST_NONE);
    assert_int_equal(ost_of_letter('\0'), OST_NONE);
    assert_int_equal(ost_of_letter('C'), OST_NONE);
    assert_int_equal(ost_of_pg_word("refused"), OST_NONE); /* order_rejections, not orders.status */
    assert_int_equal(ost_of_pg_word("queued"), OST_NONE);
    assert_int_equal(ost_of_pg_word(""), OST_NONE);
    assert_int_equal(ost_of_pg_word(NULL), OST_NONE);
    assert_null(ost_pg_word(OST_QUEUED));
    assert_null(ost_pg_word(OST_REFUSED));
    assert_string_equal(ost_pg_word(OST_CONFIRMED), "final");
    assert_string_equal(ost_json_word(OST_CONFIRMED), "confirmed");
}

/* Final: what producer/cancel.c answers 409 without asking the consumer. A
 * persisted order ('c') is final only for an item without a payment window. */
static void test_final(void **state)
{
    (void)state;
    static const struct {
        enum ost_state s;
        bool without, with; /* final for an item without a payment window, with one */
    } want[] = {
        { OST_QUEUED, false, false },  { OST_CONFIRMED, true, false }, { OST_REFUSED, true, true },
        { OST_PENDING_PAYMENT, false, false }, { OST_PAID, true, true }, { OST_EXPIRED, true, true },
        { OST_CANCELLED, true, true },
    };
    assert_int_equal(ARRAY_SIZE(want), OST_NSTATES);
    for (size_t i = 0; i < ARRAY_SIZE(want); i++) {
        assert_int_equal(ost_final(want[i].s, false), want[i].without);
        assert_int_equal(ost_final(want[i].s, true), want[i].with);
    }
}

/* --- the table against the migrations ----------------------------------------- */

/* orders.status's CHECK holds every PostgreSQL word of the table, and
 * nothing more; order_returns.reason's, the words of the states that gave
 * their unit back. */
static void test_migration_checks(void **state)
{
    (void)state;
    char *sql = harness_slurp("sql/migrations/008_order_life.sql"), *words[MAX_WORDS];
    const char *pg[OST_NSTATES], *back[OST_NSTATES];
    size_t npg = 0, nback = 0, n;
    for (int s = 0; s < OST_NSTATES; s++) {
        if (!ost_pg_word(s))
            continue;
        pg[npg++] = ost_pg_word(s);
        if (!ost_holds_unit(s))
            back[nback++] = ost_pg_word(s);
    }
    n = harness_quoted_list(sql, "CONSTRAINT orders_status_known", "CHECK (status IN (", words, MAX_WORDS);
    same_set(words, n, pg, npg, "orders_status_known");
    free(sql);
    sql = harness_slurp("sql/migrations/008_order_life.sql");
    n = harness_quoted_list(sql, "CREATE TABLE IF NOT EXISTS order_returns", "CHECK (reason IN (", words, MAX_WORDS);
    same_set(words, n, back, nback, "order_returns.reason");
    free(sql);
}

/* --- the table against the Lua ----------------------------------------------- */

/* text with Lua comments blanked out (to the end of each line). */
static void strip_comments(char *text)
{
    for (char *p = text; (p = strstr(p, "--")) != NULL;)
        while (*p && *p != '\n')
            *p++ = ' ';
}

/* The body of "local function NAME(" in text: from its line to its "end"
 * at the same indentation, as a new string. */
static char *lua_function(const char *text, const char *name)
{
    char head[96], endl[64];
    const char *p, *line, *e;
    size_t indent;
    snprintf(head, sizeof(head), "local function %s(", name);
    if (!(p = strstr(text, head)))
        fail_msg("no %s in the Lua", head);
    for (line = p; line > text && line[-1] != '\n'; line--)
        ;
    indent = (size_t)(p - line);
    snprintf(endl, sizeof(endl), "\n%*send\n", (int)indent, "");
    if (!(e = strstr(p, endl)))
        fail_msg("no end of %s", name);
    return strndup(p, (size_t)(e - p) + strlen(endl));
}

/* Sort the letters of s, each once. */
static void sort_letters(char *s)
{
    bool seen[26] = { false };
    size_t n = 0;
    for (const char *p = s; *p; p++)
        if (*p >= 'a' && *p <= 'z')
            seen[*p - 'a'] = true;
    for (int i = 0; i < 26; i++)
        if (seen[i])
            s[n++] = (char)('a' + i);
    s[n] = '\0';
}

/* The letters after each occurrence of PAT (a regex whose one group is the
 * letter) in text, sorted, each once. */
static void letters(const char *text, const char *pat, char *out, size_t len)
{
    regex_t re;
    regmatch_t m[2];
    size_t n = 0;
    assert_int_equal(regcomp(&re, pat, REG_EXTENDED), 0);
    for (const char *p = text; regexec(&re, p, 2, m, 0) == 0; p += m[0].rm_eo) {
        assert_true(n + 1 < len);
        out[n++] = p[m[1].rm_so];
    }
    regfree(&re);
    out[n] = '\0';
    sort_letters(out);
}

/* The letters of the states for which keep() holds, sorted. */
static void table_letters(bool (*keep)(enum ost_state), char *out)
{
    size_t n = 0;
    for (int s = 0; s < OST_NSTATES; s++)
        if (keep(s))
            out[n++] = ost_letter(s);
    out[n] = '\0';
    sort_letters(out);
}

static bool persisted_holding(enum ost_state s) { return ost_pg_word(s) && ost_holds_unit(s); }
static bool persisted_given_back(enum ost_state s) { return ost_pg_word(s) && !ost_holds_unit(s); }
static bool by_reserve(enum ost_state s) { return ost_writer(s) == OST_BY_RESERVE; }
static bool by_mark(enum ost_state s) { return ost_writer(s) == OST_BY_MARK; }

/* A letter compared against ('== 'x'', '~= 'x'') or written ('|x|') in a
 * Lua file's code. */
#define LUA_COMPARED "[=~]= '([a-z])'"
#define LUA_WRITTEN "'\\|([a-z])\\|"

/* Every letter the Lua compares against or writes is the table's. */
static void test_lua_letters_known(void **state)
{
    (void)state;
    static const char *const files[] = {
        "consumer/lua/seckill_return.lua",
        "consumer/lua/seckill_consumer.lua",
        "producer/lua/seckill_producer.lua",
        "ctl/lua/seckill_ctl.lua",
    };
    for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
        char *lua = harness_slurp(files[i]), seen[32] = "", written[32] = "", all[64];
        strip_comments(lua);
        letters(lua, LUA_COMPARED, seen, sizeof(seen));
        letters(lua, LUA_WRITTEN, written, sizeof(written));
        snprintf(all, sizeof(all), "%s%s", seen, written);
        if (!all[0])
            fail_msg("%s: no state letter found (has the code's shape changed?)", files[i]);
        for (const char *l = all; *l; l++)
            if (ost_of_letter(*l) == OST_NONE)
                fail_msg("%s: the letter '%c' is no state of ostate.h", files[i], *l);
        free(lua);
    }
}

/* The reservation writes the states OST_BY_RESERVE says, and only those. */
static void test_lua_reserve_writes(void **state)
{
    (void)state;
    char *lua = harness_slurp("producer/lua/seckill_producer.lua"), got[16] = "", want[16];
    strip_comments(lua);
    letters(lua, LUA_WRITTEN, got, sizeof(got));
    table_letters(by_reserve, want);
    assert_string_equal(got, want);
    free(lua);
}

/* The sets the Lua spells out by hand: the settled orders that hold a unit
 * (seckill_consumer's live(), seckill_ctl's holds_unit()), those that gave
 * theirs back (the rebuild's `back`). */
static void test_lua_unit_sets(void **state)
{
    (void)state;
    char *cons = harness_slurp("consumer/lua/seckill_consumer.lua"), *ctl = harness_slurp("ctl/lua/seckill_ctl.lua");
    char holding[16], given[16], got[16], *body, *p;
    strip_comments(cons);
    strip_comments(ctl);
    table_letters(persisted_holding, holding);
    table_letters(persisted_given_back, given);
    body = lua_function(cons, "live");
    letters(body, LUA_COMPARED, got, sizeof(got));
    assert_string_equal(got, holding);
    free(body);
    body = lua_function(ctl, "holds_unit");
    letters(body, LUA_COMPARED, got, sizeof(got));
    assert_string_equal(got, holding);
    free(body);
    body = lua_function(ctl, "item_rebuild2");
    assert_non_null(p = strstr(body, "local back = "));
    *strchr(p, '\n') = '\0';
    letters(p, LUA_COMPARED, got, sizeof(got));
    assert_string_equal(got, given);
    free(body);
    free(cons);
    free(ctl);
}

/* seckill_mark's marked(): the states it writes are the table's
 * OST_BY_MARK ones, and each replaces exactly the states not final for an
 * item with a payment window (the only items marked), but itself: a state
 * moves only forward. */
static void test_lua_mark_moves(void **state)
{
    (void)state;
    char *lua = harness_slurp("consumer/lua/seckill_return.lua"), *body, *line, *save = NULL;
    char targets[16] = "", all_targets[16] = "", marks[16];
    int rules = 0;
    strip_comments(lua);
    body = lua_function(lua, "marked");
    for (line = strtok_r(body, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (strstr(line, "if st == ")) {
            letters(line, "st == '([a-z])'", targets, sizeof(targets));
            strcat(all_targets, targets);
        } else if (strstr(line, "ok = was")) {
            char from[16] = "";
            assert_true(targets[0]);
            letters(line, "was == '([a-z])'", from, sizeof(from));
            for (const char *t = targets; *t; t++) {
                enum ost_state to = ost_of_letter(*t);
                char want[16];
                size_t n = 0;
                assert_int_not_equal(to, OST_NONE);
                for (int s = 0; s < OST_NSTATES; s++)
                    if (s != (int)to && !ost_final(s, true))
                        want[n++] = ost_letter(s);
                want[n] = '\0';
                sort_letters(want);
                if (strcmp(from, want) != 0)
                    fail_msg("marked(): '%c' replaces '%s', the table says '%s'", *t, from, want);
                rules++;
            }
        }
    }
    table_letters(by_mark, marks);
    sort_letters(all_targets);
    assert_string_equal(all_targets, marks);
    assert_int_equal(rules, (int)strlen(marks));
    free(body);
    free(lua);
}

/* --- the table against the rebuild's SQL ----------------------------------------- */

/* item_states.sql maps orders.status to the letters as the table does: each
 * WHEN, the ELSE for the one word left, and 'r' for order_rejections. */
static void test_rebuild_sql(void **state)
{
    (void)state;
    char *sql = harness_slurp("ctl/sql/item_states.sql"), *p, *end;
    bool covered[OST_NSTATES] = { false };
    regex_t re;
    regmatch_t m[3];
    int whens = 0;
    assert_non_null(p = strstr(sql, "CASE o.status WHEN"));
    assert_non_null(end = strstr(p, "END AS state"));
    *end = '\0';
    assert_int_equal(regcomp(&re, "WHEN '([a-z_]+)' THEN '([a-z])'", REG_EXTENDED), 0);
    for (char *q = p; regexec(&re, q, 3, m, 0) == 0; q += m[0].rm_eo) {
        q[m[1].rm_eo] = '\0';
        enum ost_state s = ost_of_pg_word(q + m[1].rm_so);
        if (s == OST_NONE)
            fail_msg("item_states.sql: '%s' is no PostgreSQL word of the table", q + m[1].rm_so);
        assert_int_equal(q[m[2].rm_so], ost_letter(s));
        covered[s] = true;
        whens++;
        q[m[1].rm_eo] = '\''; /* (rm_eo of the whole match lies beyond) */
    }
    regfree(&re);
    assert_true(whens > 0);
    /* The ELSE: the one PostgreSQL word no WHEN names. */
    assert_non_null(p = strstr(p, "ELSE '"));
    enum ost_state rest = ost_of_letter(p[6]);
    assert_int_not_equal(rest, OST_NONE);
    assert_non_null(ost_pg_word(rest));
    assert_false(covered[rest]);
    covered[rest] = true;
    for (int s = 0; s < OST_NSTATES; s++)
        if (ost_pg_word(s) && !covered[s])
            fail_msg("item_states.sql: orders.status '%s' is mapped to no letter", ost_pg_word(s));
    /* The refused orders, from order_rejections. */
    assert_non_null(p = strstr(end + 1, "FROM order_rejections"));
    *p = '\0';
    assert_non_null(p = strstr(end + 1, "SELECT order_id, user_id, '"));
    assert_int_equal(ost_of_letter(p[strlen("SELECT order_id, user_id, '")]), OST_REFUSED);
    free(sql);
}

/* --- the JSON words and the settlement ------------------------------------------- */

/* Each JSON word is a row of docs/api.md's table of statuses. */
static void test_api_words(void **state)
{
    (void)state;
    char *md = harness_slurp("docs/api.md"), row[64];
    for (int s = 0; s < OST_NSTATES; s++) {
        snprintf(row, sizeof(row), "\n| `%s` |", ost_json_word(s));
        if (!strstr(md, row))
            fail_msg("docs/api.md has no row for the status '%s'", ost_json_word(s));
    }
    free(md);
}

/* seckill_settle writes what the settlement outcomes say (CMSG_OUTCOMES'
 * status column): states OST_BY_SETTLE, each of them. */
static void test_settle_states(void **state)
{
    (void)state;
    bool used[OST_NSTATES] = { false };
    for (int o = 0; o < CMSG_NOUTCOMES; o++) {
        enum ost_state s = cmsg_status(o);
        if (s == OST_NONE)
            continue;
        assert_int_equal(ost_writer(s), OST_BY_SETTLE);
        used[s] = true;
    }
    for (int s = 0; s < OST_NSTATES; s++)
        assert_int_equal(used[s], ost_writer(s) == OST_BY_SETTLE);
}

/* --- the codec ----------------------------------------------------------------- */

static struct ost_value decode_ok(const char *v)
{
    struct ost_value d;
    if (ost_decode(v, strlen(v), &d) != 0)
        fail_msg("'%s' refused", v);
    return d;
}

static void test_decode_each_state(void **state)
{
    (void)state;
    struct ost_value d = decode_ok("42|q|1700000000000||");
    assert_int_equal(d.state, OST_QUEUED);
    assert_int_equal(d.user_id, 42);
    assert_int_equal(d.reserved_ms, 1700000000000);
    assert_int_equal(d.settled_ms, 0);
    assert_int_equal(d.detail_ms, 0);
    assert_string_equal(d.reason, "");
    d = decode_ok("42|c|1000|1005|");
    assert_int_equal(d.state, OST_CONFIRMED);
    assert_int_equal(d.settled_ms, 1005);
    d = decode_ok("42|r|1000|1005|no_stock");
    assert_int_equal(d.state, OST_REFUSED);
    assert_string_equal(d.reason, "no_stock");
    assert_int_equal(d.detail_ms, 0);
    d = decode_ok("42|w|1000|1005|1900000");
    assert_int_equal(d.state, OST_PENDING_PAYMENT);
    assert_int_equal(d.detail_ms, 1900000);
    assert_string_equal(d.reason, "");
    d = decode_ok("42|p|1000|1005|2000");
    assert_int_equal(d.state, OST_PAID);
    assert_int_equal(d.detail_ms, 2000);
    /* a mark keeps the settlement time it found, none included */
    d = decode_ok("42|x|1000||3000");
    assert_int_equal(d.state, OST_EXPIRED);
    assert_int_equal(d.settled_ms, 0);
    d = decode_ok("9223372036854775807|k|0|0|9223372036854775807");
    assert_int_equal(d.state, OST_CANCELLED);
    assert_int_equal(d.user_id, INT64_MAX);
    assert_int_equal(d.detail_ms, INT64_MAX);
    /* only len bytes are read */
    assert_int_equal(ost_decode("42|c|1000|1005|junk", 15, &d), 0);
    assert_int_equal(d.state, OST_CONFIRMED);
    /* Every state of the table, as its writer writes it. */
    for (int s = 0; s < OST_NSTATES; s++) {
        char v[96];
        const char *settled = ost_writer(s) == OST_BY_RESERVE ? "" : "5";
        const char *detail = ost_detail(s) == OST_DETAIL_NONE     ? ""
                             : ost_detail(s) == OST_DETAIL_REASON ? "dup_buyer"
                                                                  : "77";
        snprintf(v, sizeof(v), "3|%c|4|%s|%s", ost_letter(s), settled, detail);
        d = decode_ok(v);
        assert_int_equal(d.state, s);
        assert_int_equal(d.user_id, 3);
        assert_int_equal(d.reserved_ms, 4);
        assert_int_equal(d.settled_ms, settled[0] ? 5 : 0);
        assert_int_equal(d.detail_ms, ost_detail(s) == OST_DETAIL_MS ? 77 : 0);
        assert_string_equal(d.reason, ost_detail(s) == OST_DETAIL_REASON ? "dup_buyer" : "");
    }
}

static void test_decode_refuses(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        "42|c|1000|1005",           /* four fields */
        "42|c|1000|1005||",         /* six */
        "0|c|1000|1005|",           /* no user 0 */
        "-1|c|1000|1005|",          /* nor a negative one */
        "x|c|1000|1005|",           /* nor a word */
        " 42|c|1000|1005|",         /* nor a padded number */
        "99999999999999999999|c|1|2|", /* beyond int64 */
        "42|c|-1|1005|",            /* reserved before the epoch */
        "42|c||1005|",              /* no reservation time */
        "42|c|1000|-5|",
        "42|z|1000|1005|",          /* a letter the table lacks */
        "42|C|1000|1005|",
        "42||1000|1005|",           /* no letter */
        "42|cc|1000|1005|",         /* two */
        "42|q|1000|1005|",          /* queued, yet settled */
        "42|q|1000||x",             /* queued, with a detail */
        "42|c|1000||",              /* persisted, not settled */
        "42|c|1000|1005|no_stock",  /* persisted, with a reason */
        "42|r|1000||no_stock",      /* refused, not settled */
        "42|r|1000|1005|",          /* refused without a reason */
        "42|r|1000|1005|No_stock",  /* a reason is lower case */
        "42|r|1000|1005|no-stock",
        "42|w|1000|1005|",          /* a mark without its time */
        "42|w|1000|1005|0",         /* a time from 1 */
        "42|p|1000|1005|-5",
        "42|x|1000|1005|later",
        "42|k|1000|1005|3000|",     /* a sixth field */
        "42|c|1000|123456789012345678901234|", /* a field of OST_FIELD_MAX bytes */
        "42|r|1000|1005|abcdefghijklmnopqrstuvwx",
    };
    struct ost_value d = { .state = OST_PAID, .user_id = 5 };
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
        if (ost_decode(bad[i], strlen(bad[i]), &d) == 0)
            fail_msg("'%s' taken as an order's state", bad[i]);
    /* refused values leave *out as it was */
    assert_int_equal(d.state, OST_PAID);
    assert_int_equal(d.user_id, 5);
    /* the longest field that fits */
    assert_int_equal(ost_decode("42|r|1000|1005|abcdefghijklmnopqrstuvw", 38, &d), 0);
    assert_string_equal(d.reason, "abcdefghijklmnopqrstuvw");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_columns),
        cmocka_unit_test(test_final),
        cmocka_unit_test(test_migration_checks),
        cmocka_unit_test(test_lua_letters_known),
        cmocka_unit_test(test_lua_reserve_writes),
        cmocka_unit_test(test_lua_unit_sets),
        cmocka_unit_test(test_lua_mark_moves),
        cmocka_unit_test(test_rebuild_sql),
        cmocka_unit_test(test_api_words),
        cmocka_unit_test(test_settle_states),
        cmocka_unit_test(test_decode_each_state),
        cmocka_unit_test(test_decode_refuses),
    };
    return cmocka_run_group_tests_name("ostate", tests, NULL, NULL);
}
