/* The waiting room (issue #58) against the stack, through a producer whose
 * Redis user has exactly the producer's rules (scripts/stack.d/redis.sh),
 * with a key of the test's own (so the test can mint the tokens a forger
 * cannot, and check each refusal): one place per buyer; the shuffle
 * reproduced from the stored seed (seckillctl queue audit, and again here),
 * and done again when a failover lost it;
 * a buy without, with a forged, a reused, an expired, another buyer's,
 * another item's, a premature and a lapsed admission, each refused with its
 * reason, and nothing sold but the good one; sold out told to every waiter
 * at once; a unit given back (seckill_return, as an expiry does) admitting
 * the next in line; abandoned places passed over and an unused admission
 * giving its slot back; two producers serving one queue (one admitter, the
 * same places, a takeover); Redis unreachable for the producer: nothing
 * sold, with a token or without; and a room nobody admits counted stalled
 * (the gauge an alert reads). */
#include "funclibs.h"
#include "harness.h"

#include <inttypes.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "admtoken.h"
#include "keys.h"
#include "rfunc.h"
#include "sale.h"

/* The test producers' room: short lives, so the waits are short. */
#define TOKEN_LIFE_S 3
#define ABANDON_S 3
/* How far ahead of a test's item the sale opens: time to join first. */
#define OPENS_IN_MS 1500

struct prod {
    struct cfg c;
    char cfgpath[128], log[128];
    int port, mport;
    pid_t pid;
};

static struct prod P1;
static char user[64], pwfile[128], keydir[64];
static struct keyring *keys;

/* --- fixtures ------------------------------------------------------------ */

/* An ACL user "sktest-wroom-PID" with the producer's rules and a password
 * in pwfile: this suite's producers connect as it, and turning it off
 * (sale_acl_user_switch) touches no other daemon. */
static void acl_user_make(void)
{
    char password[40];
    sale_acl_user("producer", ":queue:adm", "wroom", user, sizeof(user), password, sizeof(password));
    snprintf(pwfile, sizeof(pwfile), "%s/redis-pw", keydir);
    harness_write_secret(pwfile, password);
}

static void prod_start(struct prod *p)
{
    char bin[512], entry[96];
    bool ok;
    harness_cfg(&p->c);
    harness_set_str(&p->c.redis.key_prefix, harness_conf.redis.key_prefix);
    harness_set_str(&p->c.redis.user[CFG_ROLE_PRODUCER], user);
    harness_set_str(&p->c.redis.password_file[CFG_ROLE_PRODUCER], pwfile);
    harness_set_str(&p->c.producer.admission_key_dir, keydir);
    snprintf(entry, sizeof(entry), "t1:%s/adm-key", keydir);
    for (size_t i = 0; i < p->c.producer.admission_keys.n; i++)
        free(p->c.producer.admission_keys.v[i]);
    free(p->c.producer.admission_keys.v);
    p->c.producer.admission_keys.v = calloc(1, sizeof(char *));
    p->c.producer.admission_keys.v[0] = strdup(entry);
    p->c.producer.admission_keys.n = 1;
    p->c.producer.queue_token_life_s = TOKEN_LIFE_S;
    p->c.producer.queue_abandon_s = ABANDON_S;
    p->c.producer.queue_margin_pct = 0;
    /* Every buy asks Redis: a winner pressing again (a token used twice) or
     * a buyer of a sold-out item would otherwise hear 409 or 410 from the
     * producer's memory before any admission is looked at, a true answer
     * too, but not the one these cases check. */
    p->c.producer.winners_max = 0;
    p->c.producer.soldout_max_buyers = 0;
    harness_producer_ports(&p->c);
    p->port = p->c.producer.port;
    p->mport = p->c.producer.metrics_port;
    harness_cfg_file(&p->c, p->cfgpath, sizeof(p->cfgpath));
    snprintf(p->log, sizeof(p->log), "/tmp/seckill-test-wroom-%d.log", p->port);
    unlink(p->log);
    harness_bin("seckill-producer", bin, sizeof(bin));
    char *argv[] = { bin, "-c", p->cfgpath, NULL };
    p->pid = harness_spawn(argv, p->log);
    WAIT_UNTIL(harness_http(p->port, "GET", "/healthz", NULL, NULL, NULL, 0) == 200, 30000, ok);
    if (!ok)
        fail_msg("producer on port %d did not come up; see %s", p->port, p->log);
}

static void prod_stop(struct prod *p)
{
    if (p->pid <= 0)
        return;
    kill(p->pid, SIGTERM);
    int st = harness_wait_exit(p->pid, 30000);
    p->pid = 0;
    if (st != 0)
        fail_msg("producer exit status %d after SIGTERM; see %s", st, p->log);
    unlink(p->cfgpath);
    cfg_free(&p->c);
}

static int setup(void **state)
{
    char err[512], path[128];
    int was = -1;
    struct cfg c;
    harness_setup(state);
    /* This build's library: the room's functions (version 2 on). */
    redisContext *rc = harness_redis(&harness_conf);
    enum rfunc_status st = rfunc_load(rc, &funclib_producer, &was, err, sizeof(err));
    redisFree(rc);
    if (st != RFUNC_OK && st != RFUNC_NEWER) {
        fprintf(stderr, "# loading seckill_producer: %s\n", err);
        return -1;
    }
    snprintf(keydir, sizeof(keydir), "/tmp/sktest-wroom-XXXXXX");
    if (!mkdtemp(keydir))
        return -1;
    snprintf(path, sizeof(path), "%s/adm-key", keydir);
    harness_write_secret(path, "0123456789abcdef0123456789abcdef-wroom-test");
    memset(&c, 0, sizeof(c));
    static char *entry[1];
    static char e[96];
    snprintf(e, sizeof(e), "t1:%s/adm-key", keydir);
    entry[0] = e;
    c.producer.admission_keys.v = entry;
    c.producer.admission_keys.n = 1;
    if (adm_keys_load(&c, &keys, err, sizeof(err)) != 0) {
        fprintf(stderr, "# %s\n", err);
        return -1;
    }
    acl_user_make();
    prod_start(&P1);
    return 0;
}

static int teardown(void **state)
{
    char cmd[128];
    prod_stop(&P1);
    redisContext *rc = NULL;
    if (harness_redis_open(&harness_conf, &rc, cmd, sizeof(cmd)) == 0) {
        freeReplyObject(redisCommand(rc, "ACL DELUSER %s", user));
        redisFree(rc);
    }
    keyring_free(keys);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", keydir);
    (void)system(cmd);
    return harness_teardown(state);
}

/* --- the calls ------------------------------------------------------------- */

/* A new item with a room open since a second ago, whose sale opens in
 * opens_in_ms; stock units. */
static int64_t item_new(int64_t stock, int64_t opens_in_ms)
{
    char id[24], st[24], starts[24], queue[24], *out = NULL;
    int64_t item = 950000000 + (int64_t)util_rand_below(49999999), now = util_wall_ms();
    snprintf(id, sizeof(id), "%" PRId64, item);
    snprintf(st, sizeof(st), "%" PRId64, stock);
    snprintf(starts, sizeof(starts), "%" PRId64, now + opens_in_ms);
    snprintf(queue, sizeof(queue), "%" PRId64, now - 1000);
    const char *args[] = { "-c", P1.cfgpath, "item", "create", "--id", id, "--stock", st, "--starts-at", starts,
                           "--queue-opens-at", queue, NULL };
    int rc = harness_run(&out, "seckillctl", args, 30000);
    if (rc != 0)
        fail_msg("item create: %s", out);
    free(out);
    return item;
}

/* POST (join) or GET (ask) /api/v1/queue/ITEM for user: the status, the
 * JSON in *js (caller decrefs). */
static int q_call(int port, const char *method, int64_t item, int64_t uid, json_t **js)
{
    char path[128], resp[2048];
    snprintf(path, sizeof(path), "/api/v1/queue/%" PRId64 "?user_id=%" PRId64, item, uid);
    int st = harness_http(port, method, path, NULL, NULL, resp, sizeof(resp));
    *js = json_loads(resp, 0, NULL);
    if (!*js)
        fail_msg("%s %s: %d, not JSON: %s", method, path, st, resp);
    return st;
}

/* The state word of a join or an ask ("waiting", "admitted" ...); for a
 * refusal its status word. *position: the waiting position (0: none). */
static void q_state(int port, const char *method, int64_t item, int64_t uid, char *word, size_t len,
                    int64_t *position, char *token, size_t tlen)
{
    json_t *js;
    q_call(port, method, item, uid, &js);
    const char *s = json_string_value(json_object_get(js, "state"));
    if (!s)
        s = json_string_value(json_object_get(js, "status"));
    snprintf(word, len, "%s", s ? s : "?");
    if (position)
        *position = json_integer_value(json_object_get(js, "position"));
    if (token && tlen) {
        const char *t = json_string_value(json_object_get(js, "admission"));
        snprintf(token, tlen, "%s", t ? t : "");
    }
    json_decref(js);
}

static bool is_state(int port, int64_t item, int64_t uid, const char *want)
{
    char w[32];
    q_state(port, "GET", item, uid, w, sizeof(w), NULL, NULL, 0);
    return strcmp(w, want) == 0;
}

/* Ask until uid is admitted; its token into token. */
static void wait_admitted(int port, int64_t item, int64_t uid, char *token, size_t tlen)
{
    char w[32];
    bool ok;
    WAIT_UNTIL((q_state(port, "GET", item, uid, w, sizeof(w), NULL, token, tlen), strcmp(w, "admitted") == 0),
               10000, ok);
    if (!ok)
        fail_msg("user %" PRId64 " not admitted to item %" PRId64 " (last: %s)", uid, item, w);
}

/* A buy with token (NULL: no header): the status, the body in resp. */
static int buy(int port, int64_t item, int64_t uid, const char *token, char *resp, size_t len)
{
    char body[128];
    snprintf(body, sizeof(body), "{\"user_id\":%" PRId64 ",\"item_id\":%" PRId64 "}", uid, item);
    return harness_http_hdr(port, "POST", "/api/v1/seckill", "application/json", token ? ADM_HEADER : NULL,
                            token, body, resp, len);
}

/* The refusal a buy hears: 403 admission_refused with reason want. */
static void refused(int64_t item, int64_t uid, const char *token, const char *want)
{
    char resp[512], expect[128];
    int st = buy(P1.port, item, uid, token, resp, sizeof(resp));
    snprintf(expect, sizeof(expect), "{\"status\":\"admission_refused\",\"reason\":\"%s\"}", want);
    if (st != 403 || strcmp(resp, expect) != 0)
        fail_msg("buy of %" PRId64 " by %" PRId64 " with %s: %d %s, want 403 %s", item, uid,
                 token ? token : "no token", st, resp, expect);
}

static long long item_int(int64_t item, const char *cmd, enum keys_item_part part)
{
    char key[KEYS_MAX];
    keys_item(key, sizeof(key), harness_conf.redis.key_prefix, item, part);
    redisContext *rc = harness_redis(&harness_conf);
    long long v = harness_int(rc, "%s %s", cmd, key);
    redisFree(rc);
    return v;
}

static char *queue_field(int64_t item, const char *field)
{
    char key[KEYS_MAX];
    keys_queue(key, sizeof(key), harness_conf.redis.key_prefix, item, KEYS_QUEUE_META);
    redisContext *rc = harness_redis(&harness_conf);
    redisReply *r = harness_cmd(rc, "HGET %s %s", key, field);
    char *v = r->type == REDIS_REPLY_STRING ? strdup(r->str) : NULL;
    freeReplyObject(r);
    redisFree(rc);
    return v;
}

static bool line_whole(int64_t item)
{
    char *v = queue_field(item, "shuffled");
    bool whole = v && strcmp(v, "1") == 0;
    free(v);
    return whole;
}

static void wait_opened(int64_t item)
{
    bool ok;
    WAIT_UNTIL(line_whole(item), 10000, ok);
    if (!ok)
        fail_msg("item %" PRId64 ": the opening did not place the pre-queue; see %s", item, P1.log);
}

/* seckillctl queue SUB --item ITEM [extra]: its exit status, its output in
 * *out (caller frees). */
static int ctl_queue(const char *sub, int64_t item, const char *extra, const char *extra_v, char **out)
{
    char id[24];
    snprintf(id, sizeof(id), "%" PRId64, item);
    const char *args[] = { "-c", P1.cfgpath, "queue", sub, "--item", id, extra, extra_v, NULL };
    return harness_run(out, "seckillctl", args, 30000);
}

/* A token the producers' key signs, for what a forger might hope to use. */
static void mint(struct adm_token *t, char *out, size_t len)
{
    assert_int_equal(adm_keys_mint(keys, t, out, len), 0);
}

/* The first of users from..to the room admitted, or 0. */
static int64_t admitted_among(int port, int64_t item, int64_t from, int64_t to)
{
    for (int64_t u = from; u <= to; u++)
        if (is_state(port, item, u, "admitted"))
            return u;
    return 0;
}

/* A new item (one unit) whose n buyers from first join before its opening;
 * admission paused, so the places stand still; returns once the opening
 * has placed them all, the seed it drew in *seed (caller frees). */
static int64_t item_opened_paused(int64_t first, int n, char **seed)
{
    char w[32], *out = NULL;
    int64_t item = item_new(1, OPENS_IN_MS);
    for (int i = 0; i < n; i++)
        q_state(P1.port, "POST", item, first + i, w, sizeof(w), NULL, NULL, 0);
    assert_int_equal(ctl_queue("pause", item, NULL, NULL, &out), 0);
    free(out);
    wait_opened(item);
    *seed = queue_field(item, "seed");
    assert_non_null(*seed);
    return item;
}

/* --- the cases -------------------------------------------------------------- */

/* One place per buyer: a second join, an ask, another tab (another
 * producer's connection) say the same place; before the opening every
 * place is equal (no position), after it a later joiner is behind all who
 * joined before. */
static void test_one_place_per_buyer(void **state)
{
    (void)state;
    char w[32];
    int64_t pos, pos2, item = item_new(5, OPENS_IN_MS), pre[4] = { 11, 12, 13, 14 };
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) {
            q_state(P1.port, "POST", item, pre[i], w, sizeof(w), &pos, NULL, 0);
            assert_string_equal(w, "waiting");
            assert_int_equal(pos, 0); /* null: every place equal */
        }
    assert_int_equal(item_int(item, "EXISTS", KEYS_ITEM_STOCK), 1);
    char key[KEYS_MAX];
    keys_queue(key, sizeof(key), harness_conf.redis.key_prefix, item, KEYS_QUEUE_PRE);
    redisContext *rc = harness_redis(&harness_conf);
    assert_int_equal(harness_int(rc, "SCARD %s", key), 4);
    /* Nobody admitted yet: pause first, so the places stand still. */
    char *out = NULL;
    assert_int_equal(ctl_queue("pause", item, NULL, NULL, &out), 0);
    free(out);
    wait_opened(item);
    q_state(P1.port, "POST", item, 99, w, sizeof(w), &pos, NULL, 0); /* a later joiner */
    assert_string_equal(w, "waiting");
    assert_int_equal(pos, 5);
    for (int i = 0; i < 4; i++) {
        q_state(P1.port, "GET", item, pre[i], w, sizeof(w), &pos, NULL, 0);
        q_state(P1.port, "POST", item, pre[i], w, sizeof(w), &pos2, NULL, 0);
        assert_true(pos >= 1 && pos <= 4);
        assert_int_equal(pos, pos2);
    }
    keys_queue(key, sizeof(key), harness_conf.redis.key_prefix, item, KEYS_QUEUE_LINE);
    assert_int_equal(harness_int(rc, "ZCARD %s", key), 5);
    /* not in the room: asking changes nothing */
    assert_true(is_state(P1.port, item, 98, "none"));
    assert_int_equal(harness_int(rc, "ZCARD %s", key), 5);
    redisFree(rc);
}

/* The line's order is SHA-1(seed ':' user) of the stored seed, which the
 * producer logged; seckillctl queue audit says so, and says when it is
 * not. */
static void test_shuffle_from_seed(void **state)
{
    (void)state;
    enum { N = 30 };
    char *out = NULL, key[KEYS_MAX], *seed;
    int64_t item = item_opened_paused(1000, N, &seed);
    assert_int_equal(strlen(seed), 64);
    char said[160];
    snprintf(said, sizeof(said), "seed %s", seed);
    assert_true(harness_file_has(P1.log, said));
    /* Recomputed here: each place is the seed's, and the line is in order. */
    keys_queue(key, sizeof(key), harness_conf.redis.key_prefix, item, KEYS_QUEUE_LINE);
    redisContext *rc = harness_redis(&harness_conf);
    redisReply *r = harness_cmd(rc, "ZRANGE %s 0 -1 WITHSCORES", key);
    assert_int_equal(r->elements, 2 * N);
    int64_t last = -1;
    for (size_t i = 0; i < r->elements; i += 2) {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int n = 0;
        char text[160], hex[2 * EVP_MAX_MD_SIZE + 1];
        int len = snprintf(text, sizeof(text), "%s:%s", seed, r->element[i]->str);
        assert_true(EVP_Digest(text, (size_t)len, md, &n, EVP_sha1(), NULL));
        util_hex(hex, md, n);
        hex[13] = 0;
        int64_t want = (int64_t)strtoll(hex, NULL, 16), got = 0;
        assert_int_equal(util_parse_i64(r->element[i + 1]->str, 0, INT64_MAX, &got), 0);
        assert_int_equal(got, want);
        assert_true(got >= last);
        last = got;
    }
    freeReplyObject(r);
    int st = ctl_queue("audit", item, "--quiet", NULL, &out);
    if (st != 0 || !strstr(out, "the order holds"))
        fail_msg("queue audit: exit %d: %s", st, out);
    free(out);
    st = ctl_queue("audit", item, NULL, NULL, &out);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "\n1 "));
    free(out);
    /* A place moved by hand is found. */
    freeReplyObject(harness_cmd(rc, "ZADD %s 0 1005", key));
    st = ctl_queue("audit", item, "--quiet", NULL, &out);
    if (st != 1 || !strstr(out, "MISMATCH rank 1 user 1005"))
        fail_msg("queue audit after tampering: exit %d: %s", st, out);
    free(out);
    free(seed);
    redisFree(rc);
}

/* An opening lost with a failover (the replica that took over had not seen
 * it: the pre-queue whole again, no seed, no line) is done again by the
 * producers, with a seed of its own that the audit holds the line to, and
 * admission goes on. */
static void test_lost_opening_redone(void **state)
{
    (void)state;
    enum { N = 12 };
    char *out = NULL, pre[KEYS_MAX], line[KEYS_MAX], meta[KEYS_MAX], *seed;
    int64_t item = item_opened_paused(2000, N, &seed);
    keys_queue(pre, sizeof(pre), harness_conf.redis.key_prefix, item, KEYS_QUEUE_PRE);
    keys_queue(line, sizeof(line), harness_conf.redis.key_prefix, item, KEYS_QUEUE_LINE);
    keys_queue(meta, sizeof(meta), harness_conf.redis.key_prefix, item, KEYS_QUEUE_META);
    /* The state before the opening, as a replica that missed it holds it. */
    redisContext *rc = harness_redis(&harness_conf);
    freeReplyObject(harness_cmd(rc, "MULTI"));
    freeReplyObject(harness_cmd(rc, "DEL %s", line));
    for (int i = 0; i < N; i++)
        freeReplyObject(harness_cmd(rc, "SADD %s %d", pre, 2000 + i));
    freeReplyObject(harness_cmd(rc, "HDEL %s seed opened_ms shuffled pre_total", meta));
    redisReply *r = harness_cmd(rc, "EXEC");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    wait_opened(item);
    assert_int_equal(harness_int(rc, "ZCARD %s", line), N);
    assert_int_equal(harness_int(rc, "SCARD %s", pre), 0);
    char *seed2 = queue_field(item, "seed");
    assert_non_null(seed2);
    assert_string_not_equal(seed, seed2); /* drawn again, not the lost one */
    int st = ctl_queue("audit", item, "--quiet", NULL, &out);
    if (st != 0 || !strstr(out, "the order holds"))
        fail_msg("queue audit after the opening was done again: exit %d: %s", st, out);
    free(out);
    assert_int_equal(ctl_queue("resume", item, NULL, NULL, &out), 0);
    free(out);
    bool ok;
    WAIT_UNTIL(admitted_among(P1.port, item, 2000, 2000 + N - 1) != 0, 10000, ok);
    assert_true(ok);
    free(seed);
    free(seed2);
    redisFree(rc);
}

/* A queued item's buy: refused without an admission, with a forged one,
 * another buyer's, another item's, one minted before the opening, an
 * expired one, one for another sale of the item, one Redis does not hold
 * outstanding, and a good one used twice: each 403 with its reason, and
 * the one good buy the only unit sold. */
static void test_buy_refusals(void **state)
{
    (void)state;
    char t1[ADM_TOKEN_MAX], t2[ADM_TOKEN_MAX], bad[ADM_TOKEN_MAX + 8], resp[512], w[32];
    int64_t item = item_new(3, OPENS_IN_MS), other = item_new(3, OPENS_IN_MS);
    for (int64_t u = 21; u <= 22; u++)
        q_state(P1.port, "POST", item, u, w, sizeof(w), NULL, NULL, 0);
    /* Before the sale nobody learns more than that (seckill_reserve's order). */
    assert_int_equal(buy(P1.port, item, 21, NULL, resp, sizeof(resp)), 403);
    assert_non_null(strstr(resp, "not_started"));
    wait_opened(item);
    wait_admitted(P1.port, item, 21, t1, sizeof(t1));
    wait_admitted(P1.port, item, 22, t2, sizeof(t2));
    struct adm_token t;
    assert_int_equal(adm_decode(t1, &t), 0);
    /* What the producer refuses before Redis */
    refused(item, 21, NULL, "missing");
    refused(item, 21, "", "missing");
    refused(item, 21, "not.a.token", "malformed");
    snprintf(bad, sizeof(bad), "%s", t1);
    bad[strlen(bad) - 1] = bad[strlen(bad) - 1] == 'a' ? 'b' : 'a';
    refused(item, 21, bad, "bad_signature");
    refused(item, 22, t1, "other_buyer");
    refused(other, 21, t1, "other_item");
    struct adm_token early = t, old = t, resale = t, stranger = t;
    early.minted_ms = t.starts_ms - 1;
    mint(&early, bad, sizeof(bad));
    refused(item, 21, bad, "before_opening");
    /* Minted at the opening: a token that ran out a moment ago must not
     * also end before it was minted (this test may get here within a
     * millisecond of the admission). */
    old.minted_ms = t.starts_ms;
    old.expires_ms = util_wall_ms() - 1;
    mint(&old, bad, sizeof(bad));
    refused(item, 21, bad, "expired");
    /* What Redis refuses: another sale of the item, no admission outstanding */
    resale.starts_ms = t.starts_ms - 1000;
    resale.minted_ms = t.minted_ms - 1000;
    mint(&resale, bad, sizeof(bad));
    refused(item, 21, bad, "other_sale");
    stranger.user_id = 23; /* never admitted */
    mint(&stranger, bad, sizeof(bad));
    refused(item, 23, bad, "lapsed");
    assert_int_equal(item_int(item, "GET", KEYS_ITEM_STOCK), 3);
    /* The good one, once. */
    assert_int_equal(buy(P1.port, item, 21, t1, resp, sizeof(resp)), 202);
    refused(item, 21, t1, "used");
    assert_int_equal(item_int(item, "GET", KEYS_ITEM_STOCK), 2);
    assert_true(is_state(P1.port, item, 21, "bought"));
    /* The other admitted buyer's, once too. */
    assert_int_equal(buy(P1.port, item, 22, t2, resp, sizeof(resp)), 202);
    refused(item, 22, t2, "used");
    assert_int_equal(item_int(item, "GET", KEYS_ITEM_STOCK), 1);
    assert_true(sale_metric(P1.mport, "seckill_producer_admission_refused_total{reason=\"used\"}") >= 2);
}

/* Sold out is told to every waiter at once, not at their turn: once no
 * unit is left in Redis and none is pending, the next ask of each says so,
 * admitted or not; their places are kept. */
static void test_sold_out_at_once(void **state)
{
    (void)state;
    char tok[ADM_TOKEN_MAX], resp[512], w[32], key[KEYS_MAX];
    int64_t item = item_new(1, OPENS_IN_MS), pos;
    for (int64_t u = 31; u <= 36; u++)
        q_state(P1.port, "POST", item, u, w, sizeof(w), NULL, NULL, 0);
    wait_opened(item);
    int64_t first = 0;
    bool ok;
    /* one admitted (1 unit, no margin): whoever the seed put first */
    WAIT_UNTIL((first = admitted_among(P1.port, item, 31, 36)) != 0, 10000, ok);
    assert_true(ok);
    wait_admitted(P1.port, item, first, tok, sizeof(tok));
    for (int64_t u = 31; u <= 36; u++)
        if (u != first) {
            q_state(P1.port, "GET", item, u, w, sizeof(w), &pos, NULL, 0);
            assert_string_equal(w, "waiting");
        }
    assert_int_equal(buy(P1.port, item, first, tok, resp, sizeof(resp)), 202);
    /* Pending until the consumer persists it: a unit may still come back. */
    for (int64_t u = 31; u <= 36; u++)
        if (u != first)
            assert_true(is_state(P1.port, item, u, "waiting"));
    /* The consumer persisted it (as its settle does: the reservation cleared). */
    keys_item(key, sizeof(key), harness_conf.redis.key_prefix, item, KEYS_ITEM_PENDING);
    redisContext *rc = harness_redis(&harness_conf);
    freeReplyObject(harness_cmd(rc, "DEL %s", key));
    redisFree(rc);
    for (int64_t u = 31; u <= 36; u++)
        if (u != first)
            assert_true(is_state(P1.port, item, u, "sold_out"));
    assert_true(is_state(P1.port, item, first, "bought"));
    /* A newcomer hears it too, and takes a place for a unit that comes back. */
    q_state(P1.port, "POST", item, 37, w, sizeof(w), NULL, NULL, 0);
    assert_string_equal(w, "sold_out");
}

/* The line's users in order (at most n), first to last: their count. */
static int line_order(int64_t item, int64_t *out, int n)
{
    char key[KEYS_MAX];
    keys_queue(key, sizeof(key), harness_conf.redis.key_prefix, item, KEYS_QUEUE_LINE);
    redisContext *rc = harness_redis(&harness_conf);
    redisReply *r = harness_cmd(rc, "ZRANGE %s 0 -1", key);
    int m = 0;
    for (size_t i = 0; i < r->elements && m < n; i++)
        assert_int_equal(util_parse_i64(r->element[i]->str, 1, INT64_MAX, &out[m++]), 0);
    freeReplyObject(r);
    redisFree(rc);
    return m;
}

/* A unit given back (an expiry's, through seckill_return as the consumer
 * sends it) reopens admission for one, the next in line; the others wait. */
static void test_unit_back_admits_next(void **state)
{
    (void)state;
    char tok[ADM_TOKEN_MAX], resp[512], w[32], k[4][KEYS_MAX];
    int64_t item = item_new(1, OPENS_IN_MS), order[4], oid = 0;
    for (int64_t u = 41; u <= 44; u++)
        q_state(P1.port, "POST", item, u, w, sizeof(w), NULL, NULL, 0);
    wait_opened(item);
    assert_int_equal(line_order(item, order, 4), 4);
    wait_admitted(P1.port, item, order[0], tok, sizeof(tok));
    assert_int_equal(buy(P1.port, item, order[0], tok, resp, sizeof(resp)), 202);
    json_t *js = json_loads(resp, 0, NULL);
    assert_int_equal(util_parse_i64(json_string_value(json_object_get(js, "order_id")), 1, INT64_MAX, &oid), 0);
    json_decref(js);
    for (int i = 1; i < 4; i++)
        assert_true(is_state(P1.port, item, order[i], "waiting"));
    /* The order expired: its unit back, its buyer free to buy again. */
    keys_item(k[0], KEYS_MAX, harness_conf.redis.key_prefix, item, KEYS_ITEM_STOCK);
    keys_item(k[1], KEYS_MAX, harness_conf.redis.key_prefix, item, KEYS_ITEM_BUYERS);
    keys_item(k[2], KEYS_MAX, harness_conf.redis.key_prefix, item, KEYS_ITEM_ORDERS);
    keys_item(k[3], KEYS_MAX, harness_conf.redis.key_prefix, item, KEYS_ITEM_RETURNED);
    redisContext *rc = harness_redis(&harness_conf);
    redisReply *r = harness_cmd(rc, "FCALL seckill_return 4 %s %s %s %s 1 %" PRId64 " %" PRId64, k[0], k[1], k[2],
                                k[3], oid, order[0]);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    redisFree(rc);
    wait_admitted(P1.port, item, order[1], tok, sizeof(tok));
    for (int i = 2; i < 4; i++)
        assert_true(is_state(P1.port, item, order[i], "waiting"));
    assert_int_equal(buy(P1.port, item, order[1], tok, resp, sizeof(resp)), 202);
}

/* Everyone in users[0..n) asks once. */
static void ask_all(int64_t item, const int64_t *users, int n)
{
    char w[32];
    for (int i = 0; i < n; i++)
        q_state(P1.port, "GET", item, users[i], w, sizeof(w), NULL, NULL, 0);
}

/* users ask every 300 ms for ms: they are seen; the others are not. */
static void keep_asking(int64_t item, const int64_t *users, int n, int64_t ms)
{
    for (int64_t end = util_mono_ms() + ms; util_mono_ms() < end;) {
        ask_all(item, users, n);
        util_sleep_ms(300);
    }
}

/* A waiter who stopped asking is passed over when their turn comes, and
 * loses the place (a join puts them at the back); an admitted buyer who does
 * not buy within the admission's life gives the slot to the next. */
static void test_abandoned_and_unused(void **state)
{
    (void)state;
    char w[32], tok[ADM_TOKEN_MAX], *out = NULL;
    int64_t item = item_new(1, OPENS_IN_MS), pos;
    int64_t passed0 = sale_metric(P1.mport, "seckill_producer_queue_abandoned_total");
    int64_t lapsed0 = sale_metric(P1.mport, "seckill_producer_queue_admissions_lapsed_total");
    assert_int_equal(ctl_queue("pause", item, NULL, NULL, &out), 0);
    free(out);
    wait_opened(item);
    /* Later joiners, first come first served: 51, 52, 53. */
    for (int64_t u = 51; u <= 53; u++) {
        q_state(P1.port, "POST", item, u, w, sizeof(w), &pos, NULL, 0);
        assert_int_equal(pos, u - 50);
    }
    const int64_t asking[] = { 52, 53 };
    keep_asking(item, asking, 2, (ABANDON_S + 1) * 1000);
    assert_int_equal(ctl_queue("resume", item, NULL, NULL, &out), 0);
    free(out);
    wait_admitted(P1.port, item, 52, tok, sizeof(tok));
    assert_true(is_state(P1.port, item, 51, "none"));
    q_state(P1.port, "GET", item, 53, w, sizeof(w), &pos, NULL, 0);
    assert_string_equal(w, "waiting");
    assert_int_equal(pos, 1);
    q_state(P1.port, "POST", item, 51, w, sizeof(w), &pos, NULL, 0); /* back, behind 53 */
    assert_int_equal(pos, 2);
    assert_true(sale_metric(P1.mport, "seckill_producer_queue_abandoned_total") > passed0);
    /* 52 does not buy: once its admission runs out, 53 is admitted. */
    const int64_t waiting[] = { 51, 53 };
    bool ok;
    WAIT_UNTIL((ask_all(item, waiting, 2), is_state(P1.port, item, 53, "admitted")), (TOKEN_LIFE_S + 3) * 1000,
               ok);
    assert_true(ok);
    assert_true(is_state(P1.port, item, 52, "none"));
    refused(item, 52, tok, "expired");
    assert_true(sale_metric(P1.mport, "seckill_producer_queue_admissions_lapsed_total") > lapsed0);
}

/* Once the opening has placed the pre-queue, its waiters' asks are
 * answered from the producer's copy of the line (producer/qcopy.h), not by
 * Redis: the same positions the line gives, each answer counted, and each
 * ask written back as Redis would have written it, so a waiter who only
 * ever asks there keeps the place while those who stopped are passed over. */
static void test_asks_from_copy(void **state)
{
    (void)state;
    enum { N = 6 };
    const char *m = "seckill_producer_queue_asks_local_total";
    char *seed, w[32], *out = NULL;
    int64_t order[N], pos;
    bool ok;
    int64_t item = item_opened_paused(1100, N, &seed);
    free(seed);
    assert_int_equal(line_order(item, order, N), N);
    /* The copy comes within a few admission steps of the opening. */
    int64_t before = sale_metric(P1.mport, m);
    WAIT_UNTIL((ask_all(item, order, N), sale_metric(P1.mport, m) >= before + N), 5000, ok);
    if (!ok)
        fail_msg("no ask answered from the copy (%s %lld, %lld before); see %s", m,
                 (long long)sale_metric(P1.mport, m), (long long)before, P1.log);
    int64_t t0 = util_wall_ms();
    before = sale_metric(P1.mport, m);
    for (int i = 0; i < N; i++) {
        q_state(P1.port, "GET", item, order[i], w, sizeof(w), &pos, NULL, 0);
        assert_string_equal(w, "waiting");
        assert_int_equal(pos, i + 1);
    }
    assert_int_equal(sale_metric(P1.mport, m), before + N);
    /* Written back with the next step: "ask_ms:eta_ms", as seckill_queue's. */
    char key[KEYS_MAX], field[24];
    keys_queue(key, sizeof(key), harness_conf.redis.key_prefix, item, KEYS_QUEUE_SEEN);
    snprintf(field, sizeof(field), "%" PRId64, order[0]);
    redisContext *rc = harness_redis(&harness_conf);
    WAIT_UNTIL(harness_int(rc, "HGET %s %s", key, field) >= t0, 2000, ok);
    redisFree(rc);
    assert_true(ok);
    /* Only the last in line goes on asking (all answered by the copy): the
     * others are passed over once admission resumes, and the last admitted. */
    before = sale_metric(P1.mport, m);
    int asks = 0;
    for (int64_t end = util_mono_ms() + (ABANDON_S + 1) * 1000; util_mono_ms() < end; asks++) {
        ask_all(item, &order[N - 1], 1);
        util_sleep_ms(300);
    }
    assert_int_equal(sale_metric(P1.mport, m), before + asks);
    assert_int_equal(ctl_queue("resume", item, NULL, NULL, &out), 0);
    free(out);
    char tok[ADM_TOKEN_MAX];
    wait_admitted(P1.port, item, order[N - 1], tok, sizeof(tok));
    assert_true(is_state(P1.port, item, order[0], "none"));
}

/* The pid in the item's lease ("host:pid:rnd|until"), or 0. */
static pid_t lease_pid(int64_t item)
{
    char *v = queue_field(item, "lease"), *c;
    int pid = 0;
    if (v && (c = strchr(v, ':')) != NULL)
        pid = atoi(c + 1);
    free(v);
    return (pid_t)pid;
}

/* Two producers serve one queue: one admits at a time (the lease), both
 * give the same places, and when the admitter stops the other takes over. */
static void test_two_producers(void **state)
{
    (void)state;
    static struct prod P2;
    char w[32], tok[ADM_TOKEN_MAX], *out = NULL;
    int64_t item = item_new(100, OPENS_IN_MS + 1500), pos1, pos2;
    bool ok;
    prod_start(&P2);
    assert_int_equal(ctl_queue("pause", item, NULL, NULL, &out), 0);
    free(out);
    for (int64_t u = 71; u <= 90; u++)
        q_state(u % 2 ? P2.port : P1.port, "POST", item, u, w, sizeof(w), NULL, NULL, 0);
    wait_opened(item);
    WAIT_UNTIL(lease_pid(item) != 0, 5000, ok);
    assert_true(ok);
    pid_t holder = lease_pid(item);
    assert_true(holder == P1.pid || holder == P2.pid);
    /* Held, not passed to and fro: the same admitter a second later. */
    util_sleep_ms(1000);
    assert_int_equal(lease_pid(item), holder);
    for (int64_t u = 71; u <= 90; u++) {
        q_state(P1.port, "GET", item, u, w, sizeof(w), &pos1, NULL, 0);
        q_state(P2.port, "GET", item, u, w, sizeof(w), &pos2, NULL, 0);
        assert_true(pos1 >= 1 && pos1 <= 20);
        assert_int_equal(pos1, pos2);
    }
    /* The admitter goes; the other takes the lease once it lapses. The
     * survivor is P1 from here on (the next cases' producer). */
    pid_t left_pid = holder == P1.pid ? P2.pid : P1.pid;
    if (holder == P1.pid) {
        prod_stop(&P1);
        P1 = P2;
    } else {
        prod_stop(&P2);
    }
    memset(&P2, 0, sizeof(P2));
    WAIT_UNTIL(lease_pid(item) == left_pid, 10000, ok);
    if (!ok)
        fail_msg("the lease did not pass to the other producer (pid %d)", (int)left_pid);
    assert_int_equal(ctl_queue("resume", item, NULL, NULL, &out), 0);
    free(out);
    wait_admitted(P1.port, item, 71, tok, sizeof(tok));
}

/* Redis unreachable for the producer (its user switched off): nothing is
 * sold, with an admission or without; once back, a buy without one is
 * refused. */
static void test_redis_down_sells_nothing(void **state)
{
    (void)state;
    char tok[ADM_TOKEN_MAX], resp[512], w[32];
    int64_t item = item_new(2, OPENS_IN_MS);
    bool ok;
    q_state(P1.port, "POST", item, 61, w, sizeof(w), NULL, NULL, 0);
    wait_opened(item);
    wait_admitted(P1.port, item, 61, tok, sizeof(tok));
    sale_acl_user_switch(user, false);
    int st1 = buy(P1.port, item, 61, tok, resp, sizeof(resp));
    int st2 = buy(P1.port, item, 62, NULL, resp, sizeof(resp));
    json_t *js;
    int st3 = q_call(P1.port, "POST", item, 63, &js);
    json_decref(js);
    sale_acl_user_switch(user, true);
    assert_int_equal(item_int(item, "GET", KEYS_ITEM_STOCK), 2);
    assert_int_equal(st1, 503);
    assert_int_equal(st2, 503);
    assert_int_equal(st3, 503);
    /* Back: still no sale without an admission. */
    WAIT_UNTIL(buy(P1.port, item, 62, NULL, resp, sizeof(resp)) == 403, 15000, ok);
    assert_true(ok);
    assert_string_equal(resp, "{\"status\":\"admission_refused\",\"reason\":\"missing\"}");
    assert_int_equal(item_int(item, "GET", KEYS_ITEM_STOCK), 2);
}

/* The stalled gauge the alert SeckillQueueStalled reads: a room with
 * waiters and units whose admission nobody runs (its lease held by a
 * producer that admits nothing: here a ghost's, set by hand) counts once
 * its serving number has stood for an admission's life plus 5 s; once a
 * producer admits again (the lease given back), it does not. First in the
 * suite: this producer watches no other room yet. */
static void test_stalled_gauge(void **state)
{
    (void)state;
    char w[32], key[KEYS_MAX];
    const char *g = "seckill_producer_queue_stalled_items";
    int64_t item = item_new(5, OPENS_IN_MS);
    bool ok;
    keys_queue(key, sizeof(key), harness_conf.redis.key_prefix, item, KEYS_QUEUE_META);
    redisContext *rc = harness_redis(&harness_conf);
    freeReplyObject(harness_cmd(rc, "HSET %s lease ghost:1:x|9999999999999", key));
    for (int64_t u = 101; u <= 103; u++)
        q_state(P1.port, "POST", item, u, w, sizeof(w), NULL, NULL, 0);
    wait_opened(item);
    assert_int_equal(sale_metric(P1.mport, g), 0); /* not yet: it has only just opened */
    WAIT_UNTIL(sale_metric(P1.mport, g) == 1, (TOKEN_LIFE_S + 5 + 10) * 1000, ok);
    if (!ok)
        fail_msg("the room nobody admits was not counted stalled (gauge %lld)",
                 (long long)sale_metric(P1.mport, g));
    char *serving = queue_field(item, "serving");
    assert_true(!serving || strcmp(serving, "0") == 0);
    free(serving);
    /* The lease back: the producer takes it and calls the line (passing over
     * the waiters, who stopped asking), so the serving number moves. */
    freeReplyObject(harness_cmd(rc, "HDEL %s lease", key));
    redisFree(rc);
    WAIT_UNTIL(sale_metric(P1.mport, g) == 0, 10000, ok);
    assert_true(ok);
    serving = queue_field(item, "serving");
    assert_non_null(serving);
    assert_string_not_equal(serving, "0");
    free(serving);
}

/* Without --queue-opens-at nothing changes: a buy goes through without an
 * admission, and the room's calls say the item has none. */
static void test_no_room_no_change(void **state)
{
    (void)state;
    char resp[512];
    int64_t item = 950000000 + (int64_t)util_rand_below(49999999);
    harness_item_create(P1.cfgpath, item, 1);
    json_t *js;
    assert_int_equal(q_call(P1.port, "POST", item, 81, &js), 404);
    assert_string_equal(json_string_value(json_object_get(js, "status")), "not_queued");
    json_decref(js);
    assert_int_equal(buy(P1.port, item, 81, NULL, resp, sizeof(resp)), 202);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stalled_gauge),
        cmocka_unit_test(test_one_place_per_buyer),
        cmocka_unit_test(test_shuffle_from_seed),
        cmocka_unit_test(test_lost_opening_redone),
        cmocka_unit_test(test_buy_refusals),
        cmocka_unit_test(test_sold_out_at_once),
        cmocka_unit_test(test_unit_back_admits_next),
        cmocka_unit_test(test_abandoned_and_unused),
        cmocka_unit_test(test_asks_from_copy),
        cmocka_unit_test(test_redis_down_sells_nothing),
        cmocka_unit_test(test_no_room_no_change),
        cmocka_unit_test(test_two_producers),
    };
    harness_filter();
    return cmocka_run_group_tests_name("wroom", tests, setup, teardown);
}
