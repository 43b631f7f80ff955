/* The front door's logic with an injected clock: client addresses and
 * networks (netaddr.h), the GCRA limits, the trusted proxy header and the
 * connection counts (ratelimit.h), the winners cache (winners.h), and the
 * settings' checks at load. */
#include "harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "netaddr.h"
#include "ratelimit.h"
#include "winners.h"

#define S 1000000 /* a second in microseconds */

static struct na_addr addr(const char *s)
{
    struct na_addr a;
    if (na_parse(s, strlen(s), &a) != 0)
        fail_msg("'%s' is not an address", s);
    return a;
}

static bool has(const struct na_net *n, const char *a)
{
    struct na_addr x = addr(a);
    return na_net_has(n, &x);
}

static void test_netaddr(void **state)
{
    (void)state;
    struct na_addr a;
    struct na_net n;
    char buf[64];
    assert_int_equal(na_parse("10.1.2.3", 8, &a), 0);
    assert_true(na_is_v4(&a));
    na_format(&a, buf, sizeof(buf));
    assert_string_equal(buf, "10.1.2.3");
    assert_int_equal(na_parse("2001:db8::1", 11, &a), 0);
    assert_false(na_is_v4(&a));
    assert_int_equal(na_parse("10.1.2.3:80", 11, &a), -1);
    assert_int_equal(na_parse("example.com", 11, &a), -1);
    assert_int_equal(na_parse("", 0, &a), -1);
    /* a length shorter than the text: only that much is read */
    assert_int_equal(na_parse("10.1.2.3, 9.9.9.9", 8, &a), 0);

    assert_int_equal(na_net_parse("10.0.0.0/8", &n), 0);
    assert_true(has(&n, "10.200.1.1"));
    assert_false(has(&n, "11.0.0.1"));
    assert_false(has(&n, "::a00:1")); /* not the mapped form */
    assert_int_equal(na_net_parse("192.168.1.7", &n), 0);                  /* a lone address: /32 */
    assert_true(has(&n, "192.168.1.7"));
    assert_false(has(&n, "192.168.1.8"));
    assert_int_equal(na_net_parse("2001:db8::/32", &n), 0);
    assert_true(has(&n, "2001:db8:ffff::9"));
    assert_int_equal(na_net_parse("0.0.0.0/0", &n), 0);
    assert_true(has(&n, "8.8.8.8"));
    assert_int_equal(na_net_parse("10.0.0.0/33", &n), -1);
    assert_int_equal(na_net_parse("::/129", &n), -1);
    assert_int_equal(na_net_parse("10.0.0.0/", &n), -1);
    assert_int_equal(na_net_parse("10.0.0.0/x", &n), -1);
    assert_int_equal(na_net_parse("host/8", &n), -1);

    struct sockaddr_in sin = { .sin_family = AF_INET };
    inet_pton(AF_INET, "127.0.0.9", &sin.sin_addr);
    assert_int_equal(na_from_sockaddr((struct sockaddr *)&sin, &a), 0);
    assert_memory_equal(a.b, addr("127.0.0.9").b, 16);
}

/* A configuration with the front door's settings; proxies: NULL-ended. */
static void front_cfg(struct cfg *c, const char *header, const char **proxies)
{
    memset(c, 0, sizeof(*c));
    c->producer.max_connections = 64;
    c->producer.client_address_header = (char *)header;
    c->producer.trusted_proxies.v = (char **)proxies;
    while (proxies && proxies[c->producer.trusted_proxies.n])
        c->producer.trusted_proxies.n++;
}

static void test_gcra(void **state)
{
    (void)state;
    struct cfg c;
    struct rl *r;
    char err[128];
    struct na_addr a = addr("203.0.113.5"), b = addr("203.0.113.6");
    int64_t t = 1000 * S;
    front_cfg(&c, "", NULL);
    c.producer.address_rate_per_s = 10; /* one per 100 ms */
    c.producer.address_burst = 3;
    assert_int_equal(rl_new(&c, &r, err, sizeof(err)), 0);
    /* A rested key sends its burst at once, then waits for the rate. */
    for (int i = 0; i < 3; i++)
        assert_int_equal(rl_address(r, &a, t), 0);
    int64_t wait = rl_address(r, &a, t);
    assert_int_equal(wait, 100000);
    assert_int_equal(rl_retry_after_s(wait), 1);
    /* another address is not held back by the first */
    assert_int_equal(rl_address(r, &b, t), 0);
    /* a refused request does not count: at the time it was told, it passes */
    assert_int_equal(rl_address(r, &a, t + wait - 1), 1);
    assert_int_equal(rl_address(r, &a, t + wait), 0);
    assert_true(rl_address(r, &a, t + wait) > 0);
    /* after a long rest, the whole burst again */
    t += 10 * S;
    for (int i = 0; i < 3; i++)
        assert_int_equal(rl_address(r, &a, t), 0);
    assert_true(rl_address(r, &a, t) > 0);
    /* a reload applies at once; 0 is no limit */
    c.producer.address_rate_per_s = 0;
    for (int i = 0; i < 1000; i++)
        assert_int_equal(rl_address(r, &a, t), 0);
    /* IPv6: a client is its /64 */
    c.producer.address_rate_per_s = 1;
    c.producer.address_burst = 1;
    struct na_addr v6a = addr("2001:db8:1:2::1"), v6b = addr("2001:db8:1:2:ffff::7"), v6c = addr("2001:db8:1:3::1");
    assert_int_equal(rl_address(r, &v6a, t), 0);
    assert_true(rl_address(r, &v6b, t) > 0);
    assert_int_equal(rl_address(r, &v6c, t), 0);
    /* buyers: their own table and settings; Retry-After rounds up */
    c.producer.buyer_rate_per_s = 1;
    c.producer.buyer_burst = 2;
    assert_int_equal(rl_buyer(r, 42, t), 0);
    assert_int_equal(rl_buyer(r, 42, t), 0);
    wait = rl_buyer(r, 42, t);
    assert_int_equal(wait, S);
    assert_int_equal(rl_retry_after_s(wait + 1), 2);
    assert_int_equal(rl_buyer(r, 43, t), 0);
    rl_free(r);
}

/* Far more keys than the table holds: it stays bounded, and a key in debt
 * is held back unless the table had to forget it. */
static void test_gcra_bounded(void **state)
{
    (void)state;
    struct cfg c;
    struct rl *r;
    char err[128];
    int64_t t = 1000 * S;
    front_cfg(&c, "", NULL);
    c.producer.buyer_rate_per_s = 1;
    c.producer.buyer_burst = 1;
    assert_int_equal(rl_new(&c, &r, err, sizeof(err)), 0);
    for (int64_t u = 1; u <= 4 * RL_SLOTS; u++)
        assert_int_equal(rl_buyer(r, u, t), 0);
    /* the last ones are still remembered */
    assert_true(rl_buyer(r, 4 * RL_SLOTS, t) > 0);
    rl_free(r);
}

static struct na_addr client_of(struct rl *r, const char *peer, const char **vals, size_t n)
{
    struct na_addr p = addr(peer), out;
    rl_client(r, &p, vals, n, &out);
    return out;
}

#define SAME(got, want) assert_memory_equal((got).b, addr(want).b, 16)

static void test_trusted_header(void **state)
{
    (void)state;
    struct cfg c;
    struct rl *r;
    char err[128];
    const char *proxies[] = { "10.0.0.0/8", "192.0.2.1", NULL };
    front_cfg(&c, "X-Forwarded-For", proxies);
    assert_int_equal(rl_new(&c, &r, err, sizeof(err)), 0);
    assert_string_equal(rl_client_header(r), "X-Forwarded-For");
    /* from a trusted proxy: the header's last address */
    SAME(client_of(r, "10.1.1.1", (const char *[]){ "198.51.100.7" }, 1), "198.51.100.7");
    /* an untrusted peer's header is ignored: anyone can write one */
    SAME(client_of(r, "198.51.100.9", (const char *[]){ "198.51.100.7" }, 1), "198.51.100.9");
    /* right to left, past the trusted hops; what the client wrote before
     * them is not believed */
    SAME(client_of(r, "10.1.1.1", (const char *[]){ "1.2.3.4, 198.51.100.7 ,10.9.9.9, 192.0.2.1" }, 1),
         "198.51.100.7");
    /* a later field continues the list */
    SAME(client_of(r, "10.1.1.1", (const char *[]){ "1.2.3.4", "198.51.100.8, 10.2.2.2" }, 2), "198.51.100.8");
    /* no header from the proxy: the proxy is the client */
    SAME(client_of(r, "10.1.1.1", NULL, 0), "10.1.1.1");
    /* only trusted hops: the first of them */
    SAME(client_of(r, "10.1.1.1", (const char *[]){ "10.3.3.3,10.2.2.2" }, 1), "10.3.3.3");
    /* garbage ends the walk at the last hop that wrote sense */
    SAME(client_of(r, "10.1.1.1", (const char *[]){ "198.51.100.7, unknown" }, 1), "10.1.1.1");
    SAME(client_of(r, "10.1.1.1", (const char *[]){ "unknown, 198.51.100.7" }, 1), "198.51.100.7");
    /* empty elements name nobody; IPv6 */
    SAME(client_of(r, "10.1.1.1", (const char *[]){ "2001:db8::5,, " }, 1), "2001:db8::5");
    rl_free(r);

    /* no header configured: the peer, whatever it sends */
    front_cfg(&c, "", NULL);
    assert_int_equal(rl_new(&c, &r, err, sizeof(err)), 0);
    assert_null(rl_client_header(r));
    SAME(client_of(r, "10.1.1.1", (const char *[]){ "198.51.100.7" }, 1), "10.1.1.1");
    rl_free(r);
}

static void test_connections(void **state)
{
    (void)state;
    struct cfg c;
    struct rl *r;
    char err[128];
    const char *proxies[] = { "10.0.0.1", NULL };
    struct na_addr a = addr("198.51.100.1"), b = addr("198.51.100.2"), lb = addr("10.0.0.1");
    front_cfg(&c, "X-Forwarded-For", proxies);
    c.producer.max_connections_per_address = 2;
    assert_int_equal(rl_new(&c, &r, err, sizeof(err)), 0);
    assert_true(rl_conn_allowed(r, &a));
    rl_conn_opened(r, &a);
    rl_conn_opened(r, &a);
    assert_false(rl_conn_allowed(r, &a));
    assert_true(rl_conn_allowed(r, &b));
    /* a trusted proxy carries everyone: never capped */
    for (int i = 0; i < 10; i++)
        rl_conn_opened(r, &lb);
    assert_true(rl_conn_allowed(r, &lb));
    rl_conn_closed(r, &a);
    assert_true(rl_conn_allowed(r, &a));
    /* reloadable: a higher cap admits at once, 0 is none */
    rl_conn_opened(r, &a);
    c.producer.max_connections_per_address = 3;
    assert_true(rl_conn_allowed(r, &a));
    c.producer.max_connections_per_address = 0;
    rl_conn_opened(r, &a);
    rl_conn_opened(r, &a);
    assert_true(rl_conn_allowed(r, &a));
    assert_int_equal(rl_conn_count(r, &a), 4);
    /* many addresses opening and closing: counts stay exact (the table's
     * removals keep every other entry findable) */
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 60; i++) {
            char s[32];
            snprintf(s, sizeof(s), "172.16.%d.%d", round, i);
            struct na_addr x = addr(s);
            rl_conn_opened(r, &x);
            if (i % 3)
                rl_conn_closed(r, &x);
        }
        for (int i = 0; i < 60; i++) {
            char s[32];
            snprintf(s, sizeof(s), "172.16.%d.%d", round, i);
            struct na_addr x = addr(s);
            assert_int_equal(rl_conn_count(r, &x), i % 3 ? 0 : 1);
            if (!(i % 3))
                rl_conn_closed(r, &x);
        }
    }
    assert_int_equal(rl_conn_count(r, &a), 4);
    assert_int_equal(rl_conn_count(r, &lb), 10);
    rl_free(r);
}

static struct win *winners(struct cfg *c, int max)
{
    struct win *w;
    char err[128];
    memset(c, 0, sizeof(*c));
    c->producer.winners_max = max;
    c->producer.soldout_refresh_ms = 100;
    assert_int_equal(win_new(c, &w, err, sizeof(err)), 0);
    return w;
}

static void test_winners(void **state)
{
    (void)state;
    struct cfg c;
    struct win *w = winners(&c, 1024);
    int64_t t = 1000 * S, ids[8];
    struct win_view v = { 1, 5, 0 };
    /* taught before the item's first check: not believed */
    win_record(w, 7, 100, t);
    assert_false(win_holds(w, 7, 100, t));
    assert_int_equal(win_due(w, t, ids, 8), 1);
    assert_int_equal(ids[0], 7);
    win_observe(w, 7, &v, t + 10);
    assert_false(win_holds(w, 7, 100, t + 20));
    /* taught after a check: believed, for this item and buyer only */
    win_record(w, 7, 100, t + 20);
    assert_true(win_holds(w, 7, 100, t + 30));
    assert_false(win_holds(w, 7, 101, t + 30));
    assert_false(win_holds(w, 8, 100, t + 30));
    /* checks that find nothing moved keep it */
    win_observe(w, 7, &(struct win_view){ 1, 6, 0 }, t + 100000);
    assert_true(win_holds(w, 7, 100, t + 100010));
    /* a unit given back anywhere (the count moved): forgotten, until
     * Redis says so again after this check */
    win_observe(w, 7, &(struct win_view){ 1, 5, 1 }, t + 200000);
    assert_false(win_holds(w, 7, 100, t + 200010));
    win_record(w, 7, 100, t + 200020);
    assert_true(win_holds(w, 7, 100, t + 200030));
    /* the buyers shrank without a count (a set deleted), or the item is
     * gone: forgotten */
    win_observe(w, 7, &(struct win_view){ 1, 2, 1 }, t + 300000);
    assert_false(win_holds(w, 7, 100, t + 300010));
    win_record(w, 7, 100, t + 300020);
    assert_true(win_holds(w, 7, 100, t + 300030));
    win_observe(w, 7, &(struct win_view){ 0, 0, 0 }, t + 400000);
    assert_false(win_holds(w, 7, 100, t + 400010));
    /* a give-back by this producer: at once */
    win_observe(w, 7, &(struct win_view){ 1, 2, 1 }, t + 500000);
    win_record(w, 7, 100, t + 500020);
    assert_true(win_holds(w, 7, 100, t + 500030));
    win_forget(w, 7, 100);
    assert_false(win_holds(w, 7, 100, t + 500040));
    /* checks that stop coming stop the answers (3 periods and 100 ms) */
    win_record(w, 7, 100, t + 500050);
    assert_true(win_holds(w, 7, 100, t + 500000 + 400000));
    assert_false(win_holds(w, 7, 100, t + 500000 + 400001));
    /* every WIN_RESYNC_MS everything is asked again */
    win_observe(w, 7, &(struct win_view){ 1, 2, 1 }, t + 600000);
    win_record(w, 7, 100, t + 600010);
    win_observe(w, 7, &(struct win_view){ 1, 2, 1 }, t + 600000 + (int64_t)WIN_RESYNC_MS * 1000);
    assert_false(win_holds(w, 7, 100, t + 600010 + (int64_t)WIN_RESYNC_MS * 1000));
    /* an item idle for WIN_IDLE_MS is no longer checked, and answers nothing */
    int64_t later = t + 600010 + (int64_t)(WIN_IDLE_MS + WIN_RESYNC_MS) * 1000 + 1;
    assert_int_equal(win_due(w, later, ids, 8), 0);
    win_free(w);
}

static void test_winners_bounded(void **state)
{
    (void)state;
    struct cfg c;
    struct win *w = winners(&c, 64);
    int64_t t = 1000 * S;
    int held = 0;
    win_record(w, 9, 1, t);
    win_observe(w, 9, &(struct win_view){ 1, 1, 0 }, t + 1);
    for (int64_t u = 1; u <= 1000; u++)
        win_record(w, 9, u, t + 1 + u);
    for (int64_t u = 1; u <= 1000; u++)
        held += win_holds(w, 9, u, t + 2000);
    assert_true(held <= 64);
    assert_true(held > 0);
    assert_true(win_holds(w, 9, 1000, t + 2000)); /* the newest stays */
    win_free(w);
    /* 0: off, and NULL takes every call */
    assert_null(winners(&c, 0));
    win_record(NULL, 1, 1, t);
    assert_false(win_holds(NULL, 1, 1, t));
}

/* The settings are checked at load, with the file named. */
static void test_settings_checked(void **state)
{
    (void)state;
    char path[64], err[1024];
    struct cfg c;
    const char *base = "kafka = { brokers = \"127.0.0.1:19092\"; };\npostgres = { dbname = \"d\"; };\n";
    const struct {
        const char *producer, *want;
    } bad[] = {
        { "trusted_proxies = [ \"10.0.0.0/33\" ]; client_address_header = \"X-Forwarded-For\";",
          "'producer.trusted_proxies' entry \"10.0.0.0/33\"" },
        { "trusted_proxies = [ \"lb.example\" ]; client_address_header = \"X-Forwarded-For\";",
          "is not an address" },
        { "client_address_header = \"X-Forwarded-For\";", "go together" },
        { "trusted_proxies = [ \"10.0.0.1\" ];", "go together" },
        { "trusted_proxies = [ \"10.0.0.1\" ]; client_address_header = \"X Forwarded\";", "is not a header name" },
        { "address_burst = 0;", "out of range" },
    };
    snprintf(path, sizeof(path), "/tmp/sktest-front-%d.cfg", (int)getpid());
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fprintf(f, "%sproducer = { %s };\n", base, bad[i].producer);
        fclose(f);
        assert_int_equal(cfg_load(path, &c, err, sizeof(err)), -1);
        if (!strstr(err, bad[i].want) || !strstr(err, path))
            fail_msg("'%s': error '%s' lacks '%s' or the file", bad[i].producer, err, bad[i].want);
    }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "%sproducer = { trusted_proxies = [ \"10.0.0.0/8\", \"::1\" ]; client_address_header = "
               "\"X-Forwarded-For\"; buyer_rate_per_s = 2; };\n", base);
    fclose(f);
    assert_int_equal(cfg_load(path, &c, err, sizeof(err)), 0);
    assert_int_equal(c.producer.trusted_proxies.n, 2);
    assert_int_equal(c.producer.buyer_rate_per_s, 2);
    /* launch-day defaults: the limits are on */
    assert_int_equal(c.producer.max_connections_per_address, 64);
    assert_int_equal(c.producer.address_rate_per_s, 100);
    cfg_free(&c);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_netaddr),
        cmocka_unit_test(test_gcra),
        cmocka_unit_test(test_gcra_bounded),
        cmocka_unit_test(test_trusted_header),
        cmocka_unit_test(test_connections),
        cmocka_unit_test(test_winners),
        cmocka_unit_test(test_winners_bounded),
        cmocka_unit_test(test_settings_checked),
    };
    return cmocka_run_group_tests_name("frontdoor", tests, NULL, NULL);
}
