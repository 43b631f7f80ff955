/* The buyer's contract against the stack, over real HTTP: bearer tokens
 * (every 401, 403 for someone else's user_id), key rotation by SIGHUP, the
 * sale window decided by Redis's clock (the opening second hammered, the
 * closing), the status calls through an order's life (queued, confirmed,
 * refused; another buyer sees nothing), HTTP hygiene (Content-Length with
 * Transfer-Encoding, HEAD, bad ids), and `seckillctl item show/create`.
 *
 * One producer (producer.auth = "jwt") and one consumer on a topic, a group
 * and a Redis key prefix of their own; the rotation test starts a producer
 * of its own with keys of its own. Every test makes its own items, removed
 * from PostgreSQL at the end. */
#include "funclibs.h"
#include "harness.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "keys.h"
#include "life.h"
#include "order.h"
#include "orderidx.h"
#include "ordersig.h"
#include "rconn.h"
#include "rfunc.h"
#include "sale.h"

#define PARTS 4
#define MAX_ITEMS 64

/* The shared pipeline. */
struct rt {
    struct cfg c;
    char cfgpath[128];
    char plog[192], clog[192];
    int port;  /* the producer's, for the buyers */
    int mport; /* its operator listener (/metrics) */
    pid_t producer, consumer;
    int consumer_runs;
    PGconn *pg;
    int64_t items[MAX_ITEMS]; /* to remove from PostgreSQL at the end */
    int nitems;
};

static struct rt R;

#define sh_ok(...)                                                      \
    do {                                                                \
        if (harness_sh(__VA_ARGS__) != 0)                               \
            fail_msg("command failed: %s", #__VA_ARGS__);               \
    } while (0)

/* --- raw HTTP ------------------------------------------------------------- */

/* method path with an optional Authorization value and JSON body. */
static int http_req(int port, const char *method, const char *path, const char *authz, const char *body,
                    struct life_resp *r)
{
    char req[8192];
    int n = snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s%s%s", method,
                     path, authz ? "Authorization: " : "", authz ? authz : "", authz ? "\r\n" : "");
    if (body)
        n += snprintf(req + n, sizeof(req) - (size_t)n,
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s", strlen(body), body);
    else
        n += snprintf(req + n, sizeof(req) - (size_t)n, "\r\n");
    if (n <= 0 || (size_t)n >= sizeof(req))
        return -1;
    return life_http_raw(port, req, (size_t)n, r);
}

static int64_t json_order_id(const char *body)
{
    char v[32];
    return life_json_str(body, "order_id", v, sizeof(v)) ? strtoll(v, NULL, 10) : 0;
}

/* --- tokens ---------------------------------------------------------------- */

/* "Bearer <a token for user>" signed with the pipeline's signing key. */
static void bearer(int64_t user, char *out, size_t len)
{
    char tok[1024];
    harness_token(&R.c, user, tok, sizeof(tok));
    snprintf(out, len, "Bearer %s", tok);
}

static void b64url(const char *in, char *out)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t n = strlen(in), o = 0, i = 0;
    const unsigned char *s = (const unsigned char *)in;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
        out[o++] = a[v >> 18], out[o++] = a[(v >> 12) & 63], out[o++] = a[(v >> 6) & 63], out[o++] = a[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)s[i] << 16;
        out[o++] = a[v >> 18], out[o++] = a[(v >> 12) & 63];
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8;
        out[o++] = a[v >> 18], out[o++] = a[(v >> 12) & 63], out[o++] = a[(v >> 6) & 63];
    }
    out[o] = 0;
}

/* --- the pipeline ------------------------------------------------------------ */

static int healthz(int port)
{
    return harness_http(port, "GET", "/healthz", NULL, NULL, NULL, 0);
}

/* The producer of cfgpath, once both its ports answer: it opens the
 * operators' port (mport, 0 for none) after the buyers', so a test that
 * reads /metrics right after the buyers' port answered could find it shut
 * (CI's TSan run of 5f5de97 did). */
static pid_t producer_spawn(const char *cfgpath, const char *log, int port, int mport)
{
    char bin[512];
    bool ok;
    harness_bin("seckill-producer", bin, sizeof(bin));
    char *argv[] = { bin, "-c", (char *)cfgpath, NULL };
    pid_t pid = harness_spawn(argv, log);
    WAIT_UNTIL(healthz(port) == 200 && (mport == 0 || healthz(mport) == 200), 30000, ok);
    if (!ok)
        fail_msg("producer on port %d did not come up; see %s", port, log);
    return pid;
}

/* SIGTERM: a clean stop exits 0. */
static void daemon_stop(pid_t *pid, const char *log)
{
    if (*pid <= 0)
        return;
    assert_int_equal(kill(*pid, SIGTERM), 0);
    int st = harness_wait_exit(*pid, 30000);
    *pid = 0;
    if (st != 0)
        fail_msg("exit status %d after SIGTERM; see %s", st, log);
}

static void consumer_start(void)
{
    char bin[512];
    bool ok;
    if (R.consumer > 0)
        return;
    harness_bin("seckill-consumer", bin, sizeof(bin));
    snprintf(R.clog, sizeof(R.clog), "%s.consumer.%d.log", R.cfgpath, ++R.consumer_runs);
    char *argv[] = { bin, "-c", R.cfgpath, NULL };
    R.consumer = harness_spawn(argv, R.clog);
    WAIT_UNTIL(harness_file_has(R.clog, "assigned "), 30000, ok);
    if (!ok)
        fail_msg("consumer never got partitions; see %s", R.clog);
}

static int setup(void **state)
{
    char rnd[9], *s;
    (void)state;
    memset(&R, 0, sizeof(R));
    harness_cfg(&R.c); /* a Redis key prefix of its own */
    assert_int_equal(util_random_hex(rnd, 4), 0);
    assert_true(asprintf(&s, "sktest.buyer.%d.%s", (int)getpid(), rnd) > 0);
    free(R.c.kafka.topic);
    R.c.kafka.topic = s;
    assert_true(asprintf(&s, "%s.dlq", R.c.kafka.topic) > 0);
    free(R.c.kafka.dlq_topic);
    R.c.kafka.dlq_topic = s;
    assert_true(asprintf(&s, "sktest-buyer-%d-%s", (int)getpid(), rnd) > 0);
    free(R.c.consumer.group_id);
    R.c.consumer.group_id = s;
    R.c.consumer.metrics_port = 0;
    R.c.consumer.workers = 2;
    R.c.consumer.batch_size = 100;
    harness_producer_ports(&R.c);
    R.port = R.c.producer.port;
    R.mport = R.c.producer.metrics_port;
    R.c.producer.auth = CFG_AUTH_JWT;
    R.c.producer.connection_timeout_s = 5;
    R.c.producer.sweep_age_ms = 1000;
    R.c.producer.sweep_interval_ms = 200;
    harness_props_set(&R.c.kafka.producer_properties, "message.timeout.ms", "2000");
    harness_cfg_file(&R.c, R.cfgpath, sizeof(R.cfgpath));
    snprintf(R.plog, sizeof(R.plog), "%s.producer.log", R.cfgpath);
    if (harness_topic_create(&R.c, R.c.kafka.topic, PARTS) != 0 || harness_topic_create(&R.c, R.c.kafka.dlq_topic, 1) != 0)
        return -1;
    R.pg = harness_pg(&R.c);
    R.producer = producer_spawn(R.cfgpath, R.plog, R.port, R.mport);
    consumer_start();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    daemon_stop(&R.producer, R.plog);
    daemon_stop(&R.consumer, R.clog);
    for (int i = 0; i < R.nitems; i++) {
        harness_pg_try(&R.c, "DELETE FROM orders WHERE item_id = $1", R.items[i], 0);
        harness_pg_try(&R.c, "DELETE FROM order_rejections WHERE item_id = $1", R.items[i], 0);
        harness_pg_try(&R.c, "DELETE FROM items WHERE item_id = $1", R.items[i], 0);
    }
    PQfinish(R.pg);
    harness_topic_delete(&R.c, R.c.kafka.topic);
    harness_topic_delete(&R.c, R.c.kafka.dlq_topic);
    if (!getenv("SECKILL_TEST_KEEP_LOGS")) {
        unlink(R.plog);
        for (int i = 1; i <= R.consumer_runs; i++) {
            char p[256];
            snprintf(p, sizeof(p), "%s.consumer.%d.log", R.cfgpath, i);
            unlink(p);
        }
        unlink(R.cfgpath);
    }
    harness_redis_drop(&R.c);
    cfg_free(&R.c);
    return 0;
}

/* --- small tools ------------------------------------------------------------ */

static int run(char **out, const char *bin, const char *const *args)
{
    return harness_run(out, bin, args, 60000);
}

static int64_t new_item_id(void)
{
    return 940000000000LL + (int64_t)util_rand_below(59999999999ULL);
}

static int64_t new_user_base(void)
{
    return 300000000000LL + (int64_t)util_rand_below(99999999999ULL);
}

/* seckillctl item create; starts/ends 0: no bound. */
static int64_t item_new(int64_t stock, int64_t starts_ms, int64_t ends_ms)
{
    char sid[24], sst[24], a[24], b[24], *out;
    const char *args[16] = { "-c", R.cfgpath, "item", "create", "--id", sid, "--stock", sst };
    int n = 8;
    int64_t item = new_item_id();
    snprintf(sid, sizeof(sid), "%" PRId64, item);
    snprintf(sst, sizeof(sst), "%" PRId64, stock);
    if (starts_ms) {
        snprintf(a, sizeof(a), "%" PRId64, starts_ms);
        args[n++] = "--starts-at";
        args[n++] = a;
    }
    if (ends_ms) {
        snprintf(b, sizeof(b), "%" PRId64, ends_ms);
        args[n++] = "--ends-at";
        args[n++] = b;
    }
    args[n] = NULL;
    assert_true(R.nitems < MAX_ITEMS);
    R.items[R.nitems++] = item;
    int st = run(&out, "seckillctl", args);
    if (st != 0)
        fail_msg("item create exited %d: %s", st, out);
    free(out);
    return item;
}

static int64_t pg_i64(const char *sql, int64_t a1, int64_t a2)
{
    char p[2][24];
    snprintf(p[0], sizeof(p[0]), "%" PRId64, a1);
    snprintf(p[1], sizeof(p[1]), "%" PRId64, a2);
    const char *params[] = { p[0], p[1] };
    PGresult *r = PQexecParams(R.pg, sql, strstr(sql, "$2") ? 2 : 1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK && PQresultStatus(r) != PGRES_COMMAND_OK)
        fail_msg("%s: %s", sql, PQerrorMessage(R.pg));
    int64_t v = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) && !PQgetisnull(r, 0, 0)
                    ? strtoll(PQgetvalue(r, 0, 0), NULL, 10)
                    : -1;
    PQclear(r);
    return v;
}

/* Redis's clock in ms (the one the reservation script decides with); -1. */
static int64_t redis_time_ms(redisContext *rc)
{
    redisReply *r = redisCommand(rc, "TIME");
    int64_t v = -1;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
        v = strtoll(r->element[0]->str, NULL, 10) * 1000 + strtoll(r->element[1]->str, NULL, 10) / 1000;
    if (r)
        freeReplyObject(r);
    return v;
}

static int64_t redis_now(void)
{
    redisContext *rc = harness_redis(&R.c);
    int64_t v = redis_time_ms(rc);
    redisFree(rc);
    assert_true(v > 0);
    return v;
}

static long long item_redis(int64_t item, enum keys_item_part part, const char *cmd, const char *arg)
{
    char key[KEYS_MAX];
    redisContext *rc = harness_redis(&R.c);
    keys_item(key, sizeof(key), R.c.redis.key_prefix, item, part);
    long long v = arg ? harness_int(rc, "%s %s %s", cmd, key, arg) : harness_int(rc, "%s %s", cmd, key);
    redisFree(rc);
    return v;
}

/* The orders hash state "USER|S|RESERVED|SETTLED|REASON" of an order, into out. */
static bool order_state(int64_t item, int64_t oid, char *out, size_t len)
{
    char key[KEYS_MAX];
    redisContext *rc = harness_redis(&R.c);
    keys_item(key, sizeof(key), R.c.redis.key_prefix, item, KEYS_ITEM_ORDERS);
    redisReply *r = harness_cmd(rc, "HGET %s o:%lld", key, (long long)oid);
    bool ok = r->type == REDIS_REPLY_STRING;
    if (ok)
        snprintf(out, len, "%s", r->str);
    freeReplyObject(r);
    redisFree(rc);
    return ok;
}

/* The first field of an item's orders hash, in Redis's own order (a small
 * hash is a listpack, which HSCAN returns whole, front first), into out. */
static bool orders_first_field(int64_t item, char *out, size_t len)
{
    char key[KEYS_MAX];
    redisContext *rc = harness_redis(&R.c);
    keys_item(key, sizeof(key), R.c.redis.key_prefix, item, KEYS_ITEM_ORDERS);
    redisReply *r = harness_cmd(rc, "HSCAN %s 0", key);
    bool ok = r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_ARRAY &&
              r->element[1]->elements > 0;
    if (ok)
        snprintf(out, len, "%s", r->element[1]->element[0]->str);
    freeReplyObject(r);
    redisFree(rc);
    return ok;
}

/* POST a buy: token for user (0: none), body {"item_id":I} (+ user_id when
 * body_user is not 0). */
static int buy(int port, int64_t user, int64_t body_user, int64_t item, struct life_resp *r)
{
    char authz[1100], body[128];
    if (user)
        bearer(user, authz, sizeof(authz));
    if (body_user)
        snprintf(body, sizeof(body), "{\"item_id\":%" PRId64 ",\"user_id\":%" PRId64 "}", item, body_user);
    else
        snprintf(body, sizeof(body), "{\"item_id\":%" PRId64 "}", item);
    return http_req(port, "POST", "/api/v1/seckill", user ? authz : NULL, body, r);
}

/* GET or HEAD a status path as user (0: no token). */
static int status_call(const char *method, const char *path, int64_t user, struct life_resp *r)
{
    char authz[1100];
    if (user)
        bearer(user, authz, sizeof(authz));
    return http_req(R.port, method, path, user ? authz : NULL, NULL, r);
}

static int get_order(int64_t oid, int64_t user, struct life_resp *r)
{
    char path[64];
    snprintf(path, sizeof(path), "/api/v1/orders/%" PRId64, oid);
    return status_call("GET", path, user, r);
}

static int get_mine(int64_t item, int64_t user, struct life_resp *r)
{
    char path[64];
    snprintf(path, sizeof(path), "/api/v1/seckill/%" PRId64, item);
    return status_call("GET", path, user, r);
}

static bool order_is(int64_t oid, int64_t user, const char *status)
{
    struct life_resp r;
    char st[32];
    return get_order(oid, user, &r) == 200 && life_json_str(r.body, "status", st, sizeof(st)) &&
           strcmp(st, status) == 0;
}

static void expect_status(const struct life_resp *r, int code, const char *word)
{
    char st[64];
    if (r->status != code || !life_json_str(r->body, "status", st, sizeof(st)) || strcmp(st, word) != 0)
        fail_msg("want %d \"%s\", got %d: %s", code, word, r->status, r->body);
}

static void fmt_ms(int64_t ms, char *out, size_t len)
{
    util_format_time_ms(ms, out, len);
}

/* --- a. who the buyer is ---------------------------------------------------------- */

static void expect_401(const struct life_resp *r, const char *why, const char *tok)
{
    char v[256];
    if (r->status != 401)
        fail_msg("want 401 (%s), got %d: %s", why, r->status, r->body);
    assert_true(life_resp_header(r, "WWW-Authenticate", v, sizeof(v)));
    assert_string_equal(v, "Bearer error=\"invalid_token\"");
    char want[128];
    snprintf(want, sizeof(want), "{\"status\":\"unauthorized\",\"error\":\"%s\"}", why);
    assert_string_equal(r->body, want);
    if (tok && tok[0]) {
        /* Never echoed, in whole or in part (its signature). */
        const char *sig = strrchr(tok, '.');
        assert_null(strstr(r->body, tok));
        assert_null(strstr(r->head, tok));
        if (sig && strlen(sig) > 8) {
            assert_null(strstr(r->body, sig + 1));
            assert_null(strstr(r->head, sig + 1));
        }
    }
}

/* A heap token (free it). Not inlined: GCC's -Wdangling-pointer takes the
 * returned string for the address of the local it was stored through. */
static __attribute__((noinline)) char *sign(const struct jwt_keyset *ks, const char *kid, int64_t user, int64_t iat,
                                            int64_t exp)
{
    char err[256], *tok = NULL;
    if (jwt_sign(ks, kid, user, iat, exp, &tok, err, sizeof(err)) != 0)
        fail_msg("jwt_sign: %s", err);
    return tok;
}

static int buy_tok(int port, const char *tok, int64_t item, struct life_resp *r)
{
    char authz[1200], body[64];
    snprintf(authz, sizeof(authz), "Bearer %s", tok);
    snprintf(body, sizeof(body), "{\"item_id\":%" PRId64 "}", item);
    return http_req(port, "POST", "/api/v1/seckill", authz, body, r);
}

static int mine_tok(int port, const char *tok, int64_t item, struct life_resp *r)
{
    char authz[1200], path[64];
    snprintf(authz, sizeof(authz), "Bearer %s", tok);
    snprintf(path, sizeof(path), "/api/v1/seckill/%" PRId64, item);
    return http_req(port, "GET", path, authz, NULL, r);
}

/* Every way to be refused a 401, then 403 and 202 by the token's buyer. */
static void test_tokens(void **state)
{
    (void)state;
    struct life_resp r;
    char body[128], hb[256], pb[256], js[256], crafted[600];
    const struct jwt_keyset *ks = harness_keys(&R.c);
    int64_t item = item_new(10, 0, 0), u = new_user_base(), now = util_wall_ms() / 1000;
    snprintf(body, sizeof(body), "{\"item_id\":%" PRId64 "}", item);

    /* No header; another scheme; not a token. */
    assert_int_equal(http_req(R.port, "POST", "/api/v1/seckill", NULL, body, &r), 401);
    expect_401(&r, "missing token", NULL);
    assert_int_equal(http_req(R.port, "POST", "/api/v1/seckill", "Basic dXNlcjpwYXNz", body, &r), 401);
    expect_401(&r, "missing token", "dXNlcjpwYXNz");
    assert_int_equal(http_req(R.port, "POST", "/api/v1/seckill", "Bearer garbage-not-a-jwt", body, &r), 401);
    expect_401(&r, "malformed token", "garbage-not-a-jwt");

    /* Expired an hour ago (beyond the leeway). */
    char *expired = sign(ks, NULL, u, now - 7200, now - 3600);
    assert_int_equal(buy_tok(R.port, expired, item, &r), 401);
    expect_401(&r, "token expired", expired);

    /* A good token whose signature's first character is changed. */
    char *bad = sign(ks, NULL, u, now, now + 3600);
    char *sig = strrchr(bad, '.') + 1;
    sig[0] = sig[0] == 'A' ? 'B' : 'A';
    assert_int_equal(buy_tok(R.port, bad, item, &r), 401);
    expect_401(&r, "bad signature", bad);

    /* "alg":"none", unsigned, with the configured key id. */
    b64url("{\"alg\":\"none\",\"typ\":\"JWT\",\"kid\":\"dev-hs256\"}", hb);
    snprintf(js, sizeof(js), "{\"sub\":\"%" PRId64 "\",\"iat\":%" PRId64 ",\"exp\":%" PRId64 "}", u, now, now + 3600);
    b64url(js, pb);
    snprintf(crafted, sizeof(crafted), "%s.%s.", hb, pb);
    assert_int_equal(buy_tok(R.port, crafted, item, &r), 401);
    expect_401(&r, "algorithm not allowed", crafted);
    /* The same claims signed HS256 but the header swapped for alg none. */
    char *real = sign(ks, NULL, u, now, now + 3600);
    snprintf(crafted, sizeof(crafted), "%s.%s%s", hb, pb, strrchr(real, '.'));
    assert_int_equal(buy_tok(R.port, crafted, item, &r), 401);
    expect_401(&r, "algorithm not allowed", crafted);

    /* The status calls want a token too. */
    assert_int_equal(get_order(12345, 0, &r), 401);
    expect_401(&r, "missing token", NULL);
    assert_int_equal(get_mine(item, 0, &r), 401);
    expect_401(&r, "missing token", NULL);
    assert_int_equal(mine_tok(R.port, expired, item, &r), 401);
    expect_401(&r, "token expired", expired);

    /* None of that reserved anything. */
    assert_int_equal(item_redis(item, KEYS_ITEM_STOCK, "GET", NULL), 10);
    assert_int_equal(item_redis(item, KEYS_ITEM_BUYERS, "SCARD", NULL), 0);

    /* Someone else's user_id in the body: 403, nothing reserved. */
    assert_int_equal(buy(R.port, u, u + 1, item, &r), 403);
    expect_status(&r, 403, "forbidden");
    assert_int_equal(item_redis(item, KEYS_ITEM_STOCK, "GET", NULL), 10);
    /* The token's own user_id in the body, or none: the token's buyer. */
    assert_int_equal(buy(R.port, u, u, item, &r), 202);
    expect_status(&r, 202, "accepted");
    assert_true(json_order_id(r.body) > 0);
    assert_int_equal(buy(R.port, u + 2, 0, item, &r), 202);
    int64_t oid2 = json_order_id(r.body);
    char field[32];
    snprintf(field, sizeof(field), "%" PRId64, u);
    assert_int_equal(item_redis(item, KEYS_ITEM_BUYERS, "SISMEMBER", field), 1);
    snprintf(field, sizeof(field), "%" PRId64, u + 1);
    assert_int_equal(item_redis(item, KEYS_ITEM_BUYERS, "SISMEMBER", field), 0);
    snprintf(field, sizeof(field), "%" PRId64, u + 2);
    assert_int_equal(item_redis(item, KEYS_ITEM_BUYERS, "SISMEMBER", field), 1);
    snprintf(field, sizeof(field), "u:%" PRId64, u + 2);
    assert_int_equal(item_redis(item, KEYS_ITEM_ORDERS, "HGET", field), oid2);
    /* The same buyer again, by token: duplicate. */
    assert_int_equal(buy(R.port, u + 2, 0, item, &r), 409);
    expect_status(&r, 409, "duplicate");

    /* A token from `seckillctl token issue` is a buyer's token. */
    char *out, uid[24];
    snprintf(uid, sizeof(uid), "%" PRId64, u + 3);
    const char *args[] = { "-c", R.cfgpath, "token", "issue", "--user", uid, "--ttl", "10m", NULL };
    assert_int_equal(run(&out, "seckillctl", args), 0);
    out[strcspn(out, "\r\n")] = 0;
    assert_int_equal(buy_tok(R.port, out, item, &r), 202);
    snprintf(field, sizeof(field), "%" PRId64, u + 3);
    assert_int_equal(item_redis(item, KEYS_ITEM_BUYERS, "SISMEMBER", field), 1);
    assert_int_equal(item_redis(item, KEYS_ITEM_STOCK, "GET", NULL), 7);
    free(out);
    free(expired);
    free(bad);
    free(real);
}

/* --- b. key rotation --------------------------------------------------------------- */

static void write_file(const char *path, const char *content)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_true(fputs(content, f) >= 0);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(path, 0600), 0); /* an HS256 secret is a password file */
}

static void set_keys(struct cfg *c, const char *k1, const char *k2)
{
    for (size_t i = 0; i < c->jwt.keys.n; i++)
        free(c->jwt.keys.v[i]);
    free(c->jwt.keys.v);
    c->jwt.keys.n = k2 ? 2 : 1;
    c->jwt.keys.v = calloc(c->jwt.keys.n, sizeof(char *));
    assert_non_null(c->jwt.keys.v);
    c->jwt.keys.v[0] = strdup(k1);
    if (k2)
        c->jwt.keys.v[1] = strdup(k2);
}

static void cfg_rewrite(const struct cfg *c, const char *path)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    cfg_write(c, f);
    assert_int_equal(fclose(f), 0);
}

static int log_count(const char *path, const char *needle)
{
    char *buf = NULL;
    size_t len;
    int n = 0;
    if (util_read_file(path, &buf, &len) != 0)
        return 0;
    for (const char *p = strstr(buf, needle); p; p = strstr(p + 1, needle))
        n++;
    free(buf);
    return n;
}

static struct jwt_keyset *keys_load(const struct cfg *c)
{
    char err[512];
    struct jwt_keyset *ks = NULL;
    if (jwt_keyset_load(c, JWT_USE_SIGN, &ks, err, sizeof(err)) != 0)
        fail_msg("jwt keys: %s", err);
    return ks;
}

/* SIGHUP, then wait until the log says the reload happened (n-th time). */
static void hup(pid_t pid, const char *log, const char *line, int n)
{
    bool ok;
    assert_int_equal(kill(pid, SIGHUP), 0);
    WAIT_UNTIL(log_count(log, line) >= n, 15000, ok);
    if (!ok)
        fail_msg("no %d x '%s' in %s after SIGHUP", n, line, log);
}

static void test_key_rotation(void **state)
{
    (void)state;
    struct life_resp r;
    char dir[] = "/tmp/seckill-buyer-keys-XXXXXX", pa[128], pbk[128], cfgpath[128], log[192];
    char sa[65], sb[65], sb2[65];
    struct cfg c;
    int64_t u = new_user_base(), now = util_wall_ms() / 1000;
    const char *reloaded = "configuration reloaded from", *rejected = "reload rejected";
    assert_non_null(mkdtemp(dir));
    snprintf(pa, sizeof(pa), "%s/a.secret", dir);
    snprintf(pbk, sizeof(pbk), "%s/b.secret", dir);
    assert_int_equal(util_random_hex(sa, 32), 0);
    assert_int_equal(util_random_hex(sb, 32), 0);
    assert_int_equal(util_random_hex(sb2, 32), 0);
    write_file(pa, sa);
    write_file(pbk, sb);

    /* A producer of its own on the suite's topic and keys in Redis, with
     * key a only; the tokens of both keys made beforehand. */
    harness_cfg(&c);
    harness_set_str(&c.redis.key_prefix, R.c.redis.key_prefix);
    harness_set_str(&c.kafka.topic, R.c.kafka.topic);
    harness_set_str(&c.kafka.dlq_topic, R.c.kafka.dlq_topic);
    harness_set_str(&c.jwt.key_dir, dir);
    harness_set_str(&c.jwt.signing_key, "");
    c.producer.auth = CFG_AUTH_JWT;
    harness_producer_ports(&c);
    c.producer.connection_timeout_s = 5;
    set_keys(&c, "a:HS256:a.secret", "b:HS256:b.secret");
    struct jwt_keyset *ab = keys_load(&c);
    set_keys(&c, "a:HS256:a.secret", NULL);
    harness_cfg_file(&c, cfgpath, sizeof(cfgpath));
    snprintf(log, sizeof(log), "%s.producer.log", cfgpath);
    pid_t pid = producer_spawn(cfgpath, log, c.producer.port, c.producer.metrics_port);
    int port = c.producer.port;
    int64_t item = item_new(100, 0, 0);
    char *a1 = sign(ab, "a", u + 1, now, now + 3600), *b1 = sign(ab, "b", u + 2, now, now + 3600);

    assert_int_equal(buy_tok(port, a1, item, &r), 202);
    assert_int_equal(buy_tok(port, b1, item, &r), 401);
    expect_401(&r, "unknown key id", b1);

    /* Key b added to the file, SIGHUP: b's tokens are good. */
    set_keys(&c, "a:HS256:a.secret", "b:HS256:b.secret");
    cfg_rewrite(&c, cfgpath);
    hup(pid, log, reloaded, 1);
    assert_int_equal(buy_tok(port, b1, item, &r), 202);
    assert_int_equal(buy_tok(port, a1, item, &r), 409); /* still a's buyer, past the auth */

    /* a's file replaced by a secret too short, SIGHUP: refused, and the keys
     * that run stay, for tokens seen before and new ones alike. */
    write_file(pa, "too-short-secret");
    hup(pid, log, rejected, 1);
    assert_true(harness_file_has(log, "a.secret"));
    assert_true(harness_file_has(log, "at least 32 bytes"));
    assert_false(harness_file_has(log, "too-short-secret")); /* key material is never printed */
    assert_false(harness_file_has(log, sa));
    assert_int_equal(log_count(log, reloaded), 1);
    assert_int_equal(mine_tok(port, a1, item, &r), 200);
    assert_int_equal(json_order_id(r.body) > 0, 1);
    assert_int_equal(mine_tok(port, b1, item, &r), 200);
    char *a3 = sign(ab, "a", u + 3, now, now + 3600), *b4 = sign(ab, "b", u + 4, now, now + 3600);
    assert_int_equal(buy_tok(port, a3, item, &r), 202);
    assert_int_equal(buy_tok(port, b4, item, &r), 202);

    /* Key a removed: its tokens stop at once, the cached ones too. */
    set_keys(&c, "b:HS256:b.secret", NULL);
    cfg_rewrite(&c, cfgpath);
    hup(pid, log, reloaded, 2);
    assert_int_equal(mine_tok(port, a1, item, &r), 401);
    expect_401(&r, "unknown key id", a1);
    assert_int_equal(mine_tok(port, b1, item, &r), 200);

    /* b's file rotated, the configuration unchanged: SIGHUP reads it again;
     * the old secret's tokens fail, the new one's pass. */
    write_file(pbk, sb2);
    hup(pid, log, reloaded, 3);
    assert_int_equal(mine_tok(port, b1, item, &r), 401);
    expect_401(&r, "bad signature", b1);
    struct jwt_keyset *b2 = keys_load(&c);
    char *b5 = sign(b2, "b", u + 5, now, now + 3600);
    assert_int_equal(buy_tok(port, b5, item, &r), 202);
    assert_int_equal(item_redis(item, KEYS_ITEM_STOCK, "GET", NULL), 95);

    daemon_stop(&pid, log);
    free(a1), free(b1), free(a3), free(b4), free(b5);
    jwt_keyset_free(ab);
    jwt_keyset_free(b2);
    if (!getenv("SECKILL_TEST_KEEP_LOGS")) {
        unlink(log);
        unlink(cfgpath);
    }
    unlink(pa);
    unlink(pbk);
    rmdir(dir);
    cfg_free(&c);
}

/* --- c. the window ------------------------------------------------------------------ */

enum { WIN_THREADS = 8, WIN_CAP = 20000, WIN_STOCK = 100 };

struct win_rec {
    int64_t user, tb, ta; /* Redis TIME before sending, after the answer */
    int64_t order_id;
    int status;
    char word[24];
    char starts_at[40];
};

struct win_thread {
    pthread_t th;
    int idx;
    int64_t item, starts, stop_at, user_base;
    pthread_mutex_t *sign_mu;
    const struct jwt_keyset *ks;
    struct win_rec *recs;
    int n;
    char err[256];
};

static void *win_run(void *arg)
{
    struct win_thread *t = arg;
    redisContext *rc = NULL;
    char body[64], authz[1200], err[200];
    snprintf(body, sizeof(body), "{\"item_id\":%" PRId64 "}", t->item);
    if (harness_redis_open(&R.c, &rc, t->err, sizeof(t->err)) != 0)
        return NULL;
    while (t->n < WIN_CAP) {
        struct win_rec *w = &t->recs[t->n];
        struct life_resp r;
        char *tok = NULL;
        int64_t now = util_wall_ms() / 1000;
        w->tb = redis_time_ms(rc);
        if (w->tb < 0) {
            snprintf(t->err, sizeof(t->err), "redis TIME failed");
            break;
        }
        if (w->tb >= t->stop_at)
            break;
        w->user = t->user_base + t->n;
        pthread_mutex_lock(t->sign_mu);
        int sr = jwt_sign(t->ks, NULL, w->user, now, now + 3600, &tok, err, sizeof(err));
        pthread_mutex_unlock(t->sign_mu);
        if (sr != 0) {
            snprintf(t->err, sizeof(t->err), "jwt_sign: %s", err);
            break;
        }
        snprintf(authz, sizeof(authz), "Bearer %s", tok);
        free(tok);
        w->status = http_req(R.port, "POST", "/api/v1/seckill", authz, body, &r);
        w->ta = redis_time_ms(rc);
        life_json_str(r.body, "status", w->word, sizeof(w->word));
        life_json_str(r.body, "starts_at", w->starts_at, sizeof(w->starts_at));
        w->order_id = json_order_id(r.body);
        t->n++;
    }
    redisFree(rc);
    return NULL;
}

/* Eight connections hammer through the opening second, each request from a
 * new buyer, each bracketed by Redis TIME: nothing is sold before starts_at,
 * a "not started" names it, everything sent after it is decided by it. */
static void test_window_opening(void **state)
{
    (void)state;
    static struct win_thread th[WIN_THREADS];
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    char want_starts[40];
    bool ok;
    int64_t now = redis_now(), starts = (now / 1000 + 3) * 1000; /* 2 to 3 s ahead, a whole second */
    int64_t item = item_new(WIN_STOCK, starts, 0), ubase = new_user_base();
    fmt_ms(starts, want_starts, sizeof(want_starts));

    WAIT_UNTIL(redis_now() >= starts - 1000, 10000, ok);
    assert_true(ok);
    assert_true(redis_now() < starts - 200); /* still well before the opening: the test can see it */
    for (int i = 0; i < WIN_THREADS; i++) {
        th[i] = (struct win_thread){ .idx = i, .item = item, .starts = starts, .stop_at = starts + 1000,
                                     .user_base = ubase + (int64_t)i * 1000000, .sign_mu = &mu,
                                     .ks = harness_keys(&R.c) };
        th[i].recs = calloc(WIN_CAP, sizeof(struct win_rec));
        assert_non_null(th[i].recs);
        assert_int_equal(pthread_create(&th[i].th, NULL, win_run, &th[i]), 0);
    }
    for (int i = 0; i < WIN_THREADS; i++)
        pthread_join(th[i].th, NULL);

    long n403 = 0, n202 = 0, nsold = 0, total = 0;
    for (int i = 0; i < WIN_THREADS; i++) {
        struct win_thread *t = &th[i];
        bool first_after = true;
        if (t->err[0])
            fail_msg("thread %d: %s", i, t->err);
        for (int k = 0; k < t->n; k++) {
            const struct win_rec *w = &t->recs[k];
            total++;
            if (w->status == 403) {
                n403++;
                assert_string_equal(w->word, "not_started");
                if (strcmp(w->starts_at, want_starts) != 0)
                    fail_msg("403 says starts_at %s, the item's is %s", w->starts_at, want_starts);
                /* decided by Redis before the opening: sent before it */
                if (w->tb >= starts)
                    fail_msg("403 for a request sent at %" PRId64 ", %" PRId64 " ms after the opening", w->tb,
                             w->tb - starts);
            } else if (w->status == 202) {
                n202++;
                assert_string_equal(w->word, "accepted");
                assert_true(w->order_id > 0);
                if (w->ta < starts)
                    fail_msg("202 answered at Redis time %" PRId64 ", %" PRId64 " ms before the opening", w->ta,
                             starts - w->ta);
            } else if (w->status == 410) {
                nsold++;
                assert_string_equal(w->word, "sold_out");
            } else {
                fail_msg("thread %d request %d: unexpected %d: %s", i, k, w->status, w->word);
            }
            /* This connection's first request sent after the opening is
             * among the first ones decided after it: accepted. */
            if (w->tb >= starts && first_after) {
                first_after = false;
                if (w->status != 202)
                    fail_msg("thread %d: the first request after the opening got %d %s", i, w->status, w->word);
            }
        }
        assert_false(first_after); /* every connection went on past the opening */
    }
    fprintf(stderr, "# window: %ld requests: %ld not started, %ld accepted, %ld sold out\n", total, n403, n202,
            nsold);
    assert_true(n403 > 0);
    assert_true(n202 > 0);
    assert_true(n202 <= WIN_STOCK);
    if (nsold > 0)
        assert_int_equal(n202, WIN_STOCK);

    /* Every accepted order's reserved_at, as the database keeps it and as
     * Redis shows it to the buyer, is at or after starts_at. */
    WAIT_UNTIL(pg_i64("SELECT count(*) FROM orders WHERE item_id = $1", item, 0) == n202, 60000, ok);
    if (!ok)
        fail_msg("%" PRId64 " of %ld orders persisted", pg_i64("SELECT count(*) FROM orders WHERE item_id = $1", item, 0),
                 n202);
    int64_t early = pg_i64("SELECT count(*) FROM orders WHERE item_id = $1 AND reserved_at < to_timestamp($2 / 1000.0)",
                           item, starts);
    int64_t min_ms = pg_i64("SELECT (extract(epoch FROM min(reserved_at)) * 1000)::bigint FROM orders WHERE item_id = $1",
                            item, 0);
    long early_redis = 0;
    for (int i = 0; i < WIN_THREADS; i++)
        for (int k = 0; k < th[i].n; k++) {
            const struct win_rec *w = &th[i].recs[k];
            char st[128];
            int64_t rsv;
            if (w->status != 202)
                continue;
            assert_true(order_state(item, w->order_id, st, sizeof(st)));
            char *bar = strchr(st, '|');
            assert_non_null(bar);
            assert_int_equal(strtoll(st, NULL, 10), w->user);
            rsv = strtoll(strchr(bar + 1, '|') + 1, NULL, 10);
            early_redis += rsv < starts;
            assert_int_equal(pg_i64("SELECT user_id FROM orders WHERE order_id = $1", w->order_id, 0), w->user);
        }
    if (early || early_redis)
        /* The producer stamps a batch before seckill_reserve decides with Redis
         * TIME; the script re-stamps what it accepts at the opening (see
         * test_restamp_at_opening), so no order says it was reserved early. */
        fail_msg("%" PRId64 " accepted orders (%ld by Redis's orders hash) have reserved_at before starts_at %s; "
                 "earliest %" PRId64 " ms early",
                 early, early_redis, want_starts, starts - min_ms);
    for (int i = 0; i < WIN_THREADS; i++)
        free(th[i].recs);
}

/* An ended window: 410 "ended"; after the end a buyer who holds a unit
 * still hears duplicate, and ended comes before sold out. */
static void test_window_end(void **state)
{
    (void)state;
    struct life_resp r;
    bool ok;
    int64_t now = redis_now(), u = new_user_base();
    int64_t past = item_new(5, now - 7200000, now - 3600000);
    assert_int_equal(buy(R.port, u, 0, past, &r), 410);
    assert_string_equal(r.body, "{\"status\":\"ended\"}");
    assert_int_equal(item_redis(past, KEYS_ITEM_STOCK, "GET", NULL), 5);

    int64_t ends = redis_now() + 3000;
    int64_t item = item_new(1, 0, ends);
    assert_int_equal(buy(R.port, u, 0, item, &r), 202);
    assert_true(redis_now() < ends); /* the 202 came inside the window */
    assert_int_equal(buy(R.port, u + 1, 0, item, &r), 410);
    expect_status(&r, 410, "sold_out");
    WAIT_UNTIL(redis_now() >= ends, 10000, ok);
    assert_true(ok);
    assert_int_equal(buy(R.port, u, 0, item, &r), 409);
    expect_status(&r, 409, "duplicate");
    assert_int_equal(buy(R.port, u + 1, 0, item, &r), 410);
    assert_string_equal(r.body, "{\"status\":\"ended\"}");
    /* No item at all comes first. */
    assert_int_equal(buy(R.port, u, 0, new_item_id(), &r), 404);
    expect_status(&r, 404, "unknown_item");
}

/* --- d. an order's life ------------------------------------------------------------ */

static void test_status_lifecycle(void **state)
{
    (void)state;
    struct life_resp r;
    char st[48], want[64], v[48];
    bool ok;
    int64_t item = item_new(5, 0, 0), u = new_user_base(), other = u + 1;

    /* Nothing reaches the database while the consumer is away. */
    daemon_stop(&R.consumer, R.clog);
    assert_int_equal(get_mine(item, u, &r), 200);
    snprintf(want, sizeof(want), "{\"status\":\"none\",\"item_id\":%" PRId64 "}", item);
    assert_string_equal(r.body, want);
    assert_int_equal(buy(R.port, u, 0, item, &r), 202);
    int64_t oid = json_order_id(r.body);
    assert_true(oid > 0);
    /* The give-back count every sold-out check reads is the hash's first
     * field, ahead of the buyer's entries (seckill_item_load): found at
     * once, where a field behind them, or none, costs a walk past them. */
    assert_true(orders_first_field(item, v, sizeof(v)));
    assert_string_equal(v, "given_back");

    assert_int_equal(get_order(oid, u, &r), 200);
    expect_status(&r, 200, "queued");
    assert_true(life_json_str(r.body, "order_id", v, sizeof(v)));
    assert_int_equal(strtoll(v, NULL, 10), oid);
    snprintf(want, sizeof(want), "\"item_id\":%" PRId64 ",", item);
    assert_non_null(strstr(r.body, want));
    assert_non_null(strstr(r.body, "\"persisted_at\":null"));
    assert_null(strstr(r.body, "reason"));
    /* reserved_at is the reservation's time, as Redis holds it */
    char state_[128];
    assert_true(order_state(item, oid, state_, sizeof(state_)));
    int64_t rsv_ms = strtoll(strchr(strchr(state_, '|') + 1, '|') + 1, NULL, 10);
    char rsv[40];
    fmt_ms(rsv_ms, rsv, sizeof(rsv));
    assert_true(life_json_str(r.body, "reserved_at", v, sizeof(v)));
    assert_string_equal(v, rsv);
    char queued_body[sizeof(r.body)];
    snprintf(queued_body, sizeof(queued_body), "%s", r.body);
    /* by item, the same */
    assert_int_equal(get_mine(item, u, &r), 200);
    assert_string_equal(r.body, queued_body);
    /* still queued while no consumer runs */
    assert_int_equal(get_order(oid, u, &r), 200);
    expect_status(&r, 200, "queued");

    /* The order index: the order's entry in its bucket, which expires. */
    {
        char bkt[KEYS_MAX], legacy[KEYS_MAX], f[24];
        redisContext *rc = harness_redis(&R.c);
        keys_order_bucket(bkt, sizeof(bkt), R.c.redis.key_prefix, oid);
        keys_order_legacy(legacy, sizeof(legacy), R.c.redis.key_prefix, oid);
        oidx_field(f, sizeof(f), oid);
        snprintf(want, sizeof(want), "%" PRId64 ":%" PRId64, item, u);
        redisReply *e = harness_cmd(rc, "HGET %s %s", bkt, f);
        assert_int_equal(e->type, REDIS_REPLY_STRING);
        assert_string_equal(e->str, want);
        freeReplyObject(e);
        assert_true(harness_int(rc, "PTTL %s", bkt) > 0);
        /* An order indexed before the buckets, under a key of its own, is
         * still found: its entry moved there, the answer stays the same. */
        assert_int_equal(harness_int(rc, "HDEL %s %s", bkt, f), 1);
        freeReplyObject(harness_cmd(rc, "SET %s %s EX 60", legacy, want));
        assert_int_equal(get_order(oid, u, &r), 200);
        assert_string_equal(r.body, queued_body);
        /* and with neither, the order is not found */
        assert_int_equal(harness_int(rc, "DEL %s", legacy), 1);
        assert_int_equal(get_order(oid, u, &r), 404);
        freeReplyObject(harness_cmd(rc, "HSET %s %s %s", bkt, f, want));
        assert_int_equal(get_order(oid, u, &r), 200);
        assert_string_equal(r.body, queued_body);
        redisFree(rc);
    }

    /* Another buyer: the order does not exist for them, and they hold none. */
    assert_int_equal(get_order(oid, other, &r), 404);
    assert_string_equal(r.body, "{\"status\":\"not_found\"}");
    assert_int_equal(get_order((INT64_C(1) << 62) + (int64_t)util_rand_below(1u << 30), other, &r), 404);
    assert_string_equal(r.body, "{\"status\":\"not_found\"}");
    /* and the two 404s cost Redis the same round trips, so timing tells
     * them apart no more than the answer does (issue #55) */
    {
        const char *trips = "seckill_producer_redis_roundtrips_total";
        int64_t t0 = sale_metric(R.mport, trips);
        assert_int_equal(get_order(oid, other, &r), 404);
        int64_t t1 = sale_metric(R.mport, trips);
        assert_int_equal(get_order((INT64_C(1) << 62) + (int64_t)util_rand_below(1u << 30), other, &r), 404);
        int64_t t2 = sale_metric(R.mport, trips);
        assert_true(t0 >= 0 && t1 > t0);
        if (t2 - t1 != t1 - t0)
            fail_msg("another buyer's order cost %lld round trips, a missing one %lld", (long long)(t1 - t0),
                     (long long)(t2 - t1));
    }
    assert_int_equal(get_mine(item, other, &r), 200);
    snprintf(want, sizeof(want), "{\"status\":\"none\",\"item_id\":%" PRId64 "}", item);
    assert_string_equal(r.body, want);

    /* The consumer back: confirmed, with the time it was persisted. */
    consumer_start();
    WAIT_UNTIL(order_is(oid, u, "confirmed"), 30000, ok);
    assert_true(ok);
    assert_int_equal(get_order(oid, u, &r), 200);
    assert_true(life_json_str(r.body, "persisted_at", v, sizeof(v)));
    int64_t pers_ms;
    assert_int_equal(util_parse_time_ms(v, &pers_ms), 0);
    assert_true(pers_ms >= rsv_ms);
    assert_true(life_json_str(r.body, "reserved_at", v, sizeof(v)));
    assert_string_equal(v, rsv);
    assert_null(strstr(r.body, "reason"));
    char confirmed_body[sizeof(r.body)];
    snprintf(confirmed_body, sizeof(confirmed_body), "%s", r.body);
    assert_int_equal(get_mine(item, u, &r), 200);
    assert_string_equal(r.body, confirmed_body);
    assert_int_equal(pg_i64("SELECT user_id FROM orders WHERE order_id = $1", oid, 0), u);
    /* still nothing for the other buyer */
    assert_int_equal(get_order(oid, other, &r), 404);
    assert_int_equal(get_mine(item, other, &r), 200);
    assert_true(life_json_str(r.body, "status", st, sizeof(st)));
    assert_string_equal(st, "none");
}

/* --- e. refused ------------------------------------------------------------------- */

static void expect_refused(int64_t item, int64_t user, const char *reason)
{
    struct life_resp r;
    bool ok;
    char v[48];
    assert_int_equal(buy(R.port, user, 0, item, &r), 202);
    int64_t oid = json_order_id(r.body);
    assert_true(oid > 0);
    WAIT_UNTIL(order_is(oid, user, "refused"), 30000, ok);
    if (!ok) {
        get_order(oid, user, &r);
        fail_msg("order %" PRId64 " not refused: %d %s", oid, r.status, r.body);
    }
    assert_int_equal(get_order(oid, user, &r), 200);
    assert_true(life_json_str(r.body, "reason", v, sizeof(v)));
    assert_string_equal(v, reason);
    assert_non_null(strstr(r.body, "\"persisted_at\":null"));
    assert_true(life_json_str(r.body, "refused_at", v, sizeof(v)));
    int64_t at;
    assert_int_equal(util_parse_time_ms(v, &at), 0);
    char refused_body[sizeof(r.body)];
    snprintf(refused_body, sizeof(refused_body), "%s", r.body);
    assert_int_equal(get_mine(item, user, &r), 200);
    assert_string_equal(r.body, refused_body);
    /* the database agrees */
    assert_int_equal(pg_i64("SELECT count(*) FROM orders WHERE order_id = $1", oid, 0), 0);
    char soid[24];
    snprintf(soid, sizeof(soid), "%" PRId64, oid);
    const char *params[] = { soid };
    PGresult *res = PQexecParams(R.pg, "SELECT reason FROM order_rejections WHERE order_id = $1", 1, NULL, params,
                                 NULL, NULL, 0);
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(res), 1);
    assert_string_equal(PQgetvalue(res, 0, 0), reason);
    PQclear(res);
}

static void test_refused(void **state)
{
    (void)state;
    int64_t u = new_user_base();
    consumer_start();
    /* Redis still sells what the database says is gone. */
    int64_t a = item_new(5, 0, 0);
    pg_i64("UPDATE items SET stock_left = 0 WHERE item_id = $1", a, 0);
    expect_refused(a, u, "no_stock");
    /* Redis sells an item the database does not have. */
    int64_t b = item_new(5, 0, 0);
    pg_i64("DELETE FROM items WHERE item_id = $1", b, 0);
    expect_refused(b, u + 1, "no_item");
}

/* --- e2. an unknown outcome ---------------------------------------------------------- */

/* The broker's pid, from the stack's pid file; 0 if none. */
static pid_t broker_pid(void)
{
    char path[512];
    long pid = 0;
    snprintf(path, sizeof(path), "%s/kafka/kafka.pid", harness_stack_dir());
    FILE *f = fopen(path, "r");
    if (f) {
        if (fscanf(f, "%ld", &pid) != 1)
            pid = 0;
        fclose(f);
    }
    return (pid_t)pid;
}

struct unknown_buy {
    int64_t item, user;
    struct life_resp r;
};

static void *buy_thread(void *arg)
{
    struct unknown_buy *b = arg;
    buy(R.port, b->user, 0, b->item, &b->r);
    return NULL;
}

/* The broker paused while an order is on its way: Kafka's answer is
 * "possibly persisted" (message.timeout.ms, 2 s here, passed after the
 * order was sent). The buyer hears 503 unknown with the order id and where
 * to ask, never "unavailable" (nothing kept), and the order id resolves
 * once the broker is back: the order exists exactly once, or the unit is
 * back and the buyer may buy. */
static void test_unknown_outcome(void **state)
{
    (void)state;
    struct unknown_buy b = { .item = item_new(5, 0, 0), .user = new_user_base() };
    struct life_resp r;
    pthread_t th;
    bool ok;
    char v[48], loc[96];
    pid_t kafka = broker_pid();
    assert_true(kafka > 0);
    /* The consumer must be reading before the pause, or its own startup
     * would be what the broker holds up. */
    assert_int_equal(buy(R.port, b.user + 1, 0, b.item, &r), 202);
    WAIT_UNTIL(order_is(json_order_id(r.body), b.user + 1, "confirmed"), 30000, ok);
    assert_true(ok);

    assert_int_equal(kill(kafka, SIGSTOP), 0);
    int started = pthread_create(&th, NULL, buy_thread, &b);
    if (started == 0)
        pthread_join(th, NULL);
    /* the broker goes on before any assertion can end the test */
    assert_int_equal(kill(kafka, SIGCONT), 0);
    assert_int_equal(started, 0);

    assert_int_equal(b.r.status, 503);
    assert_true(life_json_str(b.r.body, "status", v, sizeof(v)));
    assert_string_equal(v, "unknown");
    int64_t oid = json_order_id(b.r.body);
    assert_true(oid > 0);
    assert_non_null(strstr(b.r.head, "Retry-After: 1"));
    snprintf(loc, sizeof(loc), "Location: /api/v1/seckill/%" PRId64, b.item);
    assert_non_null(strstr(b.r.head, loc));
    /* Kept, not given back: the unit is held, a second press is a duplicate. */
    assert_int_equal(item_redis(b.item, KEYS_ITEM_STOCK, "GET", NULL), 3);
    assert_int_equal(buy(R.port, b.user, 0, b.item, &r), 409);

    /* It resolves: confirmed, by order id and by item, exactly once. */
    WAIT_UNTIL(order_is(oid, b.user, "confirmed"), 60000, ok);
    if (!ok) {
        get_order(oid, b.user, &r);
        fail_msg("order %" PRId64 " of an unknown answer did not resolve: %d %s", oid, r.status, r.body);
    }
    assert_int_equal(get_mine(b.item, b.user, &r), 200);
    assert_true(life_json_str(r.body, "status", v, sizeof(v)));
    assert_string_equal(v, "confirmed");
    assert_int_equal(json_order_id(r.body), oid);
    assert_int_equal(pg_i64("SELECT count(*) FROM orders WHERE order_id = $1", oid, 0), 1);
    char sitem[24], suser[24];
    snprintf(sitem, sizeof(sitem), "%" PRId64, b.item);
    snprintf(suser, sizeof(suser), "%" PRId64, b.user);
    const char *params[] = { sitem, suser };
    PGresult *res = PQexecParams(R.pg, "SELECT count(*) FROM orders WHERE item_id = $1 AND user_id = $2", 2, NULL,
                                 params, NULL, NULL, 0);
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    assert_string_equal(PQgetvalue(res, 0, 0), "1");
    PQclear(res);
}

/* --- f. HTTP hygiene ---------------------------------------------------------------- */

static void test_http_hygiene(void **state)
{
    (void)state;
    struct life_resp r, g;
    char req[2048], authz[1200], path[96], v[64];
    bool ok;
    int64_t item = item_new(5, 0, 0), u = new_user_base();
    consumer_start();
    bearer(u, authz, sizeof(authz));

    /* Both framings: 400, whatever the path, nothing reserved. */
    char chunk[64];
    snprintf(chunk, sizeof(chunk), "{\"item_id\":%" PRId64 "}", item);
    int n = snprintf(req, sizeof(req),
                 "POST /api/v1/seckill HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: %s\r\n"
                 "Content-Type: application/json\r\nContent-Length: %zu\r\nTransfer-Encoding: chunked\r\n"
                 "Connection: close\r\n\r\n%zx\r\n%s\r\n0\r\n\r\n",
                 authz, strlen(chunk), strlen(chunk), chunk);
    assert_int_equal(life_http_raw(R.port, req, (size_t)n, &r), 400);
    n = snprintf(req, sizeof(req),
                 "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n"
                 "Connection: close\r\n\r\n0\r\n\r\n");
    assert_int_equal(life_http_raw(R.port, req, (size_t)n, &r), 400);
    /* Two Content-Length fields that disagree: which body is this? */
    n = snprintf(req, sizeof(req),
                 "POST /api/v1/seckill HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: %s\r\n"
                 "Content-Type: application/json\r\nContent-Length: %zu\r\nContent-Length: %zu\r\n"
                 "Connection: close\r\n\r\n%s",
                 authz, strlen(chunk), strlen(chunk) + 5, chunk);
    assert_int_equal(life_http_raw(R.port, req, (size_t)n, &r), 400);
    assert_non_null(strstr(r.body, "Content-Length given twice"));
    assert_int_equal(item_redis(item, KEYS_ITEM_STOCK, "GET", NULL), 5);
    assert_int_equal(item_redis(item, KEYS_ITEM_BUYERS, "SCARD", NULL), 0);
    /* chunked alone is a body like any other */
    n = snprintf(req, sizeof(req),
                 "POST /api/v1/seckill HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: %s\r\n"
                 "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
                 "Connection: close\r\n\r\n%zx\r\n%s\r\n0\r\n\r\n",
                 authz, strlen(chunk), chunk);
    assert_int_equal(life_http_raw(R.port, req, (size_t)n, &r), 202);
    int64_t oid = json_order_id(r.body);
    assert_true(oid > 0);

    /* HEAD: the GET's status, no body (a Content-Length may say how long
     * the GET's would be). */
    assert_int_equal(http_req(R.port, "GET", "/healthz", NULL, NULL, &g), 200);
    assert_true(g.body_len > 0);
    assert_int_equal(http_req(R.port, "HEAD", "/healthz", NULL, NULL, &r), 200);
    assert_int_equal(r.body_len, 0);
    if (life_resp_header(&r, "Content-Length", v, sizeof(v)))
        assert_int_equal(strtoll(v, NULL, 10), (long long)g.body_len);
    /* /metrics: on the operators' listener (HEAD too), not the buyers' port. */
    assert_int_equal(http_req(R.mport, "HEAD", "/metrics", NULL, NULL, &r), 200);
    assert_int_equal(r.body_len, 0);
    assert_int_equal(http_req(R.port, "HEAD", "/metrics", NULL, NULL, &r), 404);

    snprintf(path, sizeof(path), "/api/v1/orders/%" PRId64, oid);
    /* settled first, so that GET and HEAD describe the same state */
    WAIT_UNTIL(order_is(oid, u, "confirmed"), 30000, ok);
    assert_true(ok);
    assert_int_equal(http_req(R.port, "GET", path, authz, NULL, &g), 200);
    assert_int_equal(http_req(R.port, "HEAD", path, authz, NULL, &r), 200);
    assert_int_equal(r.body_len, 0);
    if (life_resp_header(&r, "Content-Length", v, sizeof(v)))
        assert_int_equal(strtoll(v, NULL, 10), (long long)g.body_len);
    snprintf(path, sizeof(path), "/api/v1/seckill/%" PRId64, item);
    assert_int_equal(http_req(R.port, "HEAD", path, authz, NULL, &r), 200);
    assert_int_equal(r.body_len, 0);
    snprintf(path, sizeof(path), "/api/v1/orders/%" PRId64, (INT64_C(1) << 62) + (int64_t)util_rand_below(1u << 30));
    assert_int_equal(http_req(R.port, "GET", path, authz, NULL, &g), 404);
    assert_int_equal(http_req(R.port, "HEAD", path, authz, NULL, &r), 404);
    assert_int_equal(r.body_len, 0);
    assert_int_equal(http_req(R.port, "HEAD", path, NULL, NULL, &r), 401);
    assert_int_equal(r.body_len, 0);

    /* Bad ids in the status paths: 400, with or without a token. */
    const char *bad[] = { "0", "007", "abc", "12a", "-5", "+5", " 5", "", "9223372036854775808",
                          "99999999999999999999", "1.5", "0x10" };
    const char *prefixes[] = { "/api/v1/orders/", "/api/v1/seckill/" };
    for (size_t p = 0; p < ARRAY_SIZE(prefixes); p++)
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
            char url[96];
            snprintf(url, sizeof(url), "%s%s", prefixes[p], bad[i]);
            if (strchr(url, ' '))
                snprintf(url, sizeof(url), "%s%%205", prefixes[p]);
            for (int with = 0; with < 2; with++) {
                int st = http_req(R.port, "GET", url, with ? authz : NULL, NULL, &r);
                if (st != 400)
                    fail_msg("GET %s (%s token): %d %s", url, with ? "with" : "no", st, r.body);
                assert_non_null(strstr(r.body, "\"status\":\"bad_request\""));
            }
        }
    /* The largest id is a good one, just not an order. */
    assert_int_equal(http_req(R.port, "GET", "/api/v1/orders/9223372036854775807", authz, NULL, &r), 404);
    /* Status paths are read-only. */
    snprintf(path, sizeof(path), "/api/v1/orders/%" PRId64, oid);
    assert_int_equal(http_req(R.port, "POST", path, authz, "{}", &r), 405);
}

/* --- g. seckillctl item show / create ---------------------------------------------- */

static void test_item_show(void **state)
{
    (void)state;
    struct life_resp r;
    char *out, sid[24], a[40], b[40], line[256];
    bool ok;
    int64_t now = redis_now(), u = new_user_base();
    int64_t starts = now - 3600000, ends = now + 3600000;
    int64_t item = item_new(7, starts, ends);
    consumer_start();
    snprintf(sid, sizeof(sid), "%" PRId64, item);

    /* Two sold, then the database runs dry while Redis does not: one refused. */
    assert_int_equal(buy(R.port, u, 0, item, &r), 202);
    assert_int_equal(buy(R.port, u + 1, 0, item, &r), 202);
    WAIT_UNTIL(pg_i64("SELECT count(*) FROM orders WHERE item_id = $1", item, 0) == 2, 30000, ok);
    assert_true(ok);
    pg_i64("UPDATE items SET stock_left = 0 WHERE item_id = $1", item, 0);
    assert_int_equal(buy(R.port, u + 2, 0, item, &r), 202);
    WAIT_UNTIL(pg_i64("SELECT count(*) FROM order_rejections WHERE item_id = $1", item, 0) == 1 &&
                   item_redis(item, KEYS_ITEM_PENDING, "HLEN", NULL) == 0 &&
                   item_redis(item, KEYS_ITEM_UNPUB, "ZCARD", NULL) == 0,
               30000, ok);
    assert_true(ok);

    const char *args[] = { "-c", R.cfgpath, "item", "show", sid, NULL };
    assert_int_equal(run(&out, "seckillctl", args), 0);
    fprintf(stderr, "# item show:\n");
    for (char *p = out; *p;) {
        size_t n = strcspn(p, "\n");
        fprintf(stderr, "#   %.*s\n", (int)n, p);
        p += n + (p[n] == '\n');
    }
    fmt_ms(starts, a, sizeof(a));
    fmt_ms(ends, b, sizeof(b));
    snprintf(line, sizeof(line), "  window     %s .. %s\n", a, b);
    assert_non_null(strstr(out, line));
    long tot, left, sold, refused;
    const char *d = strstr(out, "  database   ");
    assert_non_null(d);
    assert_int_equal(sscanf(d, "  database   stock_total %ld, stock_left %ld, sold %ld, refused %ld", &tot, &left,
                            &sold, &refused),
                     4);
    assert_int_equal(tot, pg_i64("SELECT stock_total FROM items WHERE item_id = $1", item, 0));
    assert_int_equal(left, pg_i64("SELECT stock_left FROM items WHERE item_id = $1", item, 0));
    assert_int_equal(sold, pg_i64("SELECT count(*) FROM orders WHERE item_id = $1", item, 0));
    assert_int_equal(refused, pg_i64("SELECT count(*) FROM order_rejections WHERE item_id = $1", item, 0));
    assert_int_equal(tot, 7);
    assert_int_equal(sold, 2);
    assert_int_equal(refused, 1);
    long long stock, pend, unpub, buyers;
    const char *rl = strstr(out, "  redis      stock ");
    assert_non_null(rl);
    assert_int_equal(sscanf(rl, "  redis      stock %lld, pending %lld, unpublished %lld, buyers %lld", &stock,
                            &pend, &unpub, &buyers),
                     4);
    assert_int_equal(stock, item_redis(item, KEYS_ITEM_STOCK, "GET", NULL));
    assert_int_equal(pend, item_redis(item, KEYS_ITEM_PENDING, "HLEN", NULL));
    assert_int_equal(unpub, item_redis(item, KEYS_ITEM_UNPUB, "ZCARD", NULL));
    assert_int_equal(buyers, item_redis(item, KEYS_ITEM_BUYERS, "SCARD", NULL));
    assert_int_equal(stock, 4);
    assert_int_equal(buyers, 3);
    snprintf(line, sizeof(line), "  redis      window %s .. %s: open by Redis's clock\n", a, b);
    assert_non_null(strstr(out, line));
    assert_null(strstr(out, "DIFFERS"));
    free(out);

    /* Not started, ended, unknown. */
    int64_t later = item_new(1, now + 3600000, 0), gone = item_new(1, now - 7200000, now - 3600000);
    snprintf(sid, sizeof(sid), "%" PRId64, later);
    assert_int_equal(run(&out, "seckillctl", args), 0);
    fmt_ms(now + 3600000, a, sizeof(a));
    snprintf(line, sizeof(line), "  window     %s .. (until sold out)\n", a);
    assert_non_null(strstr(out, line));
    assert_non_null(strstr(out, ": not started by Redis's clock"));
    free(out);
    snprintf(sid, sizeof(sid), "%" PRId64, gone);
    assert_int_equal(run(&out, "seckillctl", args), 0);
    assert_non_null(strstr(out, ": ended by Redis's clock"));
    free(out);
    int64_t nothing = new_item_id();
    snprintf(sid, sizeof(sid), "%" PRId64, nothing);
    assert_int_equal(run(&out, "seckillctl", args), 1);
    assert_non_null(strstr(out, "not in the database"));
    free(out);

    /* A window that ends before it starts, or as it starts: exit 2, nothing made. */
    char x[24], y[24];
    snprintf(sid, sizeof(sid), "%" PRId64, nothing);
    for (int k = 0; k < 2; k++) {
        snprintf(x, sizeof(x), "%" PRId64, now + 60000);
        snprintf(y, sizeof(y), "%" PRId64, k ? now + 60000 : now + 30000);
        const char *bad[] = { "-c", R.cfgpath, "item", "create", "--id", sid, "--stock", "3", "--starts-at", x,
                              "--ends-at", y, NULL };
        assert_int_equal(run(&out, "seckillctl", bad), 2);
        assert_non_null(strstr(out, "--ends-at must be after --starts-at"));
        free(out);
    }
    const char *iso[] = { "-c", R.cfgpath, "item", "create", "--id", sid, "--stock", "3", "--starts-at",
                          "2030-01-01T10:00:00Z", "--ends-at", "2030-01-01T11:00:00+01:00", NULL };
    assert_int_equal(run(&out, "seckillctl", iso), 2);
    free(out);
    assert_int_equal(pg_i64("SELECT count(*) FROM items WHERE item_id = $1", nothing, 0), 0);
    assert_int_equal(item_redis(nothing, KEYS_ITEM_STOCK, "EXISTS", NULL), 0);
}


/* One function call through the seam, as the tests' user: its reply (the
 * caller frees), or NULL. */
static redisReply *fcall(const struct cfg *c, const struct rfunc *f, int nkeys, int nargs, const char **argv)
{
    struct rp *p = NULL;
    struct rp_batch b;
    char err[256];
    redisReply *r = NULL;
    if (harness_rp_open(c, &p, err, sizeof(err)) != 0)
        return NULL;
    rp_batch_init(&b);
    int i = rp_fcall(&b, f->name, nkeys, nargs, argv, NULL);
    if (i >= 0 && rp_run(p, &b, err, sizeof(err)) == 0)
        r = rp_take(&b, i);
    rp_batch_free(&b);
    rp_close(p);
    return r;
}
/* The producer stamps a batch before sending it, so a stamp can precede an
 * opening Redis has just passed: the script must re-stamp such a reservation
 * with its own time, everywhere it records it, and say so in its reply. Run
 * straight against the script, so the case happens every time. */
static void test_restamp_at_opening(void **state)
{
    (void)state;
    const struct rfunc sc = RFUNC_INIT("seckill_reserve", &funclib_producer);
    char k[KEYS_ITEM_PARTS][KEYS_MAX], msg[ORDER_MSG_MAX], user[24], oid[24], ts[24], field[32];
    int64_t item = new_item_id(), u = new_user_base(), order = (1LL << 43) + (int64_t)util_rand_below(1u << 30);
    redisContext *rc = harness_redis(&R.c);
    int64_t now = redis_time_ms(rc), starts = now - 2000, stamp = starts - 500;
    struct order o = { order, u, item, 1, stamp }, got;
    char err[128];
    assert_int_equal(keys_item_all(k, R.c.redis.key_prefix, item), 0);
    freeReplyObject(harness_cmd(rc, "SET %s 5", k[KEYS_ITEM_STOCK]));
    freeReplyObject(harness_cmd(rc, "HSET %s starts_ms %lld", k[KEYS_ITEM_WINDOW], (long long)starts));
    assert_int_equal(osig_sign(&o), 0);
    int n = order_encode(&o, msg, sizeof(msg));
    assert_true(n > 0);
    snprintf(user, sizeof(user), "%lld", (long long)u);
    snprintf(oid, sizeof(oid), "%lld", (long long)order);
    snprintf(ts, sizeof(ts), "%lld", (long long)stamp);
    const char *argv[KEYS_ITEM_PARTS + 4];
    for (int i = 0; i < KEYS_ITEM_PARTS; i++)
        argv[i] = k[i];
    argv[KEYS_ITEM_PARTS] = user, argv[KEYS_ITEM_PARTS + 1] = oid, argv[KEYS_ITEM_PARTS + 2] = msg;
    argv[KEYS_ITEM_PARTS + 3] = ts;
    redisReply *r = fcall(&R.c, &sc, KEYS_ITEM_PARTS, 4, argv);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 2);
    assert_int_equal(r->element[0]->integer, 1);
    int64_t at = strtoll(r->element[1]->str, NULL, 10);
    freeReplyObject(r);
    assert_true(at >= now && at >= starts);
    /* the pending message, the unpublished score and the status agree */
    r = harness_cmd(rc, "HGET %s %s", k[KEYS_ITEM_PENDING], oid);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_int_equal(order_decode(r->str, r->len, &got, err, sizeof(err)), 0);
    freeReplyObject(r);
    assert_true(got.reserved_at_ms == at && got.order_id == order && got.user_id == u);
    /* The re-stamp kept the producer's MAC, and it still verifies: it does
     * not cover reserved_at_ms, and Redis holds no key to sign again. */
    assert_string_equal(got.sig, o.sig);
    assert_int_equal(osig_verify(&got, err, sizeof(err)), KEYRING_OK);
    assert_int_equal(harness_int(rc, "ZSCORE %s %s", k[KEYS_ITEM_UNPUB], oid), at);
    snprintf(field, sizeof(field), "o:%s", oid);
    r = harness_cmd(rc, "HGET %s %s", k[KEYS_ITEM_ORDERS], field);
    char want[64];
    snprintf(want, sizeof(want), "%s|q|%lld||", user, (long long)at);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_string_equal(r->str, want);
    freeReplyObject(r);
    /* A stamp already inside the window is kept, and the reply is a plain 1. */
    snprintf(user, sizeof(user), "%lld", (long long)(u + 1));
    snprintf(oid, sizeof(oid), "%lld", (long long)(order + 1));
    snprintf(ts, sizeof(ts), "%lld", (long long)now);
    r = fcall(&R.c, &sc, KEYS_ITEM_PARTS, 4, argv);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    assert_int_equal(harness_int(rc, "ZSCORE %s %s", k[KEYS_ITEM_UNPUB], oid), now);
    freeReplyObject(harness_cmd(rc, "DEL %s %s %s %s %s %s", k[0], k[1], k[2], k[3], k[4], k[5]));
    redisFree(rc);
}

/* --- g. the front door ------------------------------------------------------ */

/* A TCP connection to 127.0.0.1:port from src (any 127/8 address: each is
 * another client to the producer); -1 on failure. */
static int connect_from(const char *src, int port)
{
    struct sockaddr_in a = { .sin_family = AF_INET };
    struct sockaddr_in d = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    inet_pton(AF_INET, src, &a.sin_addr);
    inet_pton(AF_INET, "127.0.0.1", &d.sin_addr);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || connect(fd, (struct sockaddr *)&d, sizeof(d)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* GET user's order of item on fd (closed here), with X-Forwarded-For: xff
 * when not NULL. */
static int front_get_on(int fd, int64_t user, int64_t item, const char *xff, struct life_resp *r)
{
    char req[2048], authz[1100];
    bearer(user, authz, sizeof(authz));
    int n = snprintf(req, sizeof(req),
                     "GET /api/v1/seckill/%" PRId64 " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                     "Authorization: %s\r\n%s%s%s\r\n",
                     item, authz, xff ? "X-Forwarded-For: " : "", xff ? xff : "", xff ? "\r\n" : "");
    return life_http_on(fd, req, (size_t)n, r);
}

static int front_get(const char *src, int port, int64_t user, int64_t item, const char *xff,
                     struct life_resp *r)
{
    return front_get_on(connect_from(src, port), user, item, xff, r);
}

static void expect_limited(const struct life_resp *r, const char *limit)
{
    char v[32];
    expect_status(r, 429, "rate_limited");
    assert_true(life_json_str(r->body, "limit", v, sizeof(v)));
    assert_string_equal(v, limit);
    assert_true(life_resp_header(r, "Retry-After", v, sizeof(v)));
    assert_true(strtoll(v, NULL, 10) >= 1);
}

/* Requests until the first 429 (at most max): how many passed before it;
 * -1 when none was refused. */
static int until_limited(const char *src, int port, int64_t user, int64_t item, const char *xff, int max,
                         struct life_resp *r)
{
    for (int i = 0; i < max; i++) {
        int st = front_get(src, port, user, item, xff, r);
        if (st == 429)
            return i;
        if (st != 200)
            fail_msg("from %s (%s): %d %s", src, xff ? xff : "no header", st, r->body);
    }
    return -1;
}

/* A producer of the suite's with the front door's limits of its own. */
struct front {
    struct cfg c;
    char cfgpath[128], log[192];
    pid_t pid;
};

static void front_start(struct front *f)
{
    harness_cfg(&f->c);
    harness_set_str(&f->c.redis.key_prefix, R.c.redis.key_prefix);
    harness_set_str(&f->c.kafka.topic, R.c.kafka.topic);
    harness_set_str(&f->c.kafka.dlq_topic, R.c.kafka.dlq_topic);
    f->c.producer.auth = CFG_AUTH_JWT;
    harness_producer_ports(&f->c);
    f->c.producer.connection_timeout_s = 10;
    /* a burst of 3, then one a second: the test's few requests take
     * milliseconds, far from the next second's */
    f->c.producer.address_rate_per_s = 1;
    f->c.producer.address_burst = 3;
    f->c.producer.buyer_rate_per_s = 0;
    f->c.producer.max_connections_per_address = 0;
    harness_set_str(&f->c.producer.client_address_header, "X-Forwarded-For");
    f->c.producer.trusted_proxies.v = calloc(1, sizeof(char *));
    assert_non_null(f->c.producer.trusted_proxies.v);
    f->c.producer.trusted_proxies.v[0] = strdup("127.0.0.9");
    f->c.producer.trusted_proxies.n = 1;
    harness_cfg_file(&f->c, f->cfgpath, sizeof(f->cfgpath));
    snprintf(f->log, sizeof(f->log), "%s.producer.log", f->cfgpath);
    f->pid = producer_spawn(f->cfgpath, f->log, f->c.producer.port, f->c.producer.metrics_port);
}

static void front_stop(struct front *f)
{
    daemon_stop(&f->pid, f->log);
    if (!getenv("SECKILL_TEST_KEEP_LOGS")) {
        unlink(f->log);
        unlink(f->cfgpath);
    }
    cfg_free(&f->c);
}

/* Per-address and per-buyer rates: 429 rate_limited with Retry-After for
 * the client over its rate and no other; the forwarded address believed
 * from the trusted proxy only; the limits change on SIGHUP. */
static void test_front_door_rates(void **state)
{
    (void)state;
    struct front f = { 0 };
    struct life_resp r;
    bool ok;
    int64_t item = item_new(5, 0, 0), u = new_user_base();
    const char *addr_metric = "seckill_producer_limited_total{reason=\"address\"}";
    front_start(&f);
    int port = f.c.producer.port, mport = f.c.producer.metrics_port;
    int64_t limited0 = sale_metric(mport, addr_metric);
    assert_true(limited0 >= 0);

    /* 127.0.0.2 sends its burst, then is refused; 127.0.0.3 is not. */
    assert_int_equal(until_limited("127.0.0.2", port, u, item, NULL, 10, &r), 3);
    expect_limited(&r, "address");
    assert_int_equal(front_get("127.0.0.3", port, u + 1, item, NULL, &r), 200);
    /* A header from a peer that is not a trusted proxy is not believed. */
    assert_int_equal(front_get("127.0.0.2", port, u, item, "198.51.100.1", &r), 429);
    /* Behind the trusted proxy, each forwarded client has its own rate;
     * the trusted hops of the list are skipped. */
    assert_int_equal(until_limited("127.0.0.9", port, u, item, "198.51.100.1", 10, &r), 3);
    expect_limited(&r, "address");
    assert_int_equal(front_get("127.0.0.9", port, u, item, "198.51.100.2, 127.0.0.9", &r), 200);
    assert_int_equal(front_get("127.0.0.9", port, u, item, "198.51.100.1, 127.0.0.9", &r), 429);
    /* What the client wrote before the proxy's entry is not believed. */
    assert_int_equal(front_get("127.0.0.9", port, u, item, "198.51.100.3, 198.51.100.1", &r), 429);
    /* Read over the operators' port. One read right after the 429s came
     * back short once, under TSan in CI (df4d40a; the cause not found, the
     * producer's log shows nothing of it): so waited for, and the figures in
     * the failure. */
    int64_t limited = -1;
    WAIT_UNTIL((limited = sale_metric(mport, addr_metric)) >= limited0 + 4, 5000, ok);
    if (!ok)
        fail_msg("%s: %lld, at the start %lld", addr_metric, (long long)limited, (long long)limited0);
    /* A rate, not a ban: the client passes again once Retry-After is over. */
    WAIT_UNTIL(front_get("127.0.0.2", port, u, item, NULL, &r) == 200, 5000, ok);
    assert_true(ok);
    /* /healthz is never limited (load balancers ask it from one address). */
    const char *hz = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    for (int i = 0; i < 10; i++)
        assert_int_equal(life_http_on(connect_from("127.0.0.2", port), hz, strlen(hz), &r), 200);

    /* SIGHUP: no address limit, one a second per buyer with a burst of 2. */
    f.c.producer.address_rate_per_s = 0;
    f.c.producer.buyer_rate_per_s = 1;
    f.c.producer.buyer_burst = 2;
    cfg_rewrite(&f.c, f.cfgpath);
    hup(f.pid, f.log, "configuration reloaded from", 1);
    assert_int_equal(until_limited("127.0.0.2", port, u + 2, item, NULL, 10, &r), 2);
    expect_limited(&r, "buyer");
    /* the same buyer from another address: still the buyer's rate */
    assert_int_equal(front_get("127.0.0.3", port, u + 2, item, NULL, &r), 429);
    expect_limited(&r, "buyer");
    /* another buyer is not held back by the first; no address is any more */
    assert_int_equal(until_limited("127.0.0.2", port, u + 3, item, NULL, 10, &r), 2);
    assert_true(sale_metric(mport, "seckill_producer_limited_total{reason=\"buyer\"}") >= 2);
    /* a buy is held to it too, before Redis is asked: nothing reserved */
    assert_int_equal(buy(port, u + 2, 0, item, &r), 429);
    assert_int_equal(item_redis(item, KEYS_ITEM_STOCK, "GET", NULL), 5);
    front_stop(&f);
}

/* The connection cap per address (set by SIGHUP): the connection past it
 * is closed unanswered, other addresses and the trusted proxy are not held
 * to it, and a slot comes back when a connection closes. */
static void test_front_door_connections(void **state)
{
    (void)state;
    struct front f = { 0 };
    struct life_resp r;
    bool ok;
    int64_t item = item_new(5, 0, 0), u = new_user_base();
    int held[3], lb[3];
    front_start(&f);
    int port = f.c.producer.port, mport = f.c.producer.metrics_port;
    f.c.producer.address_rate_per_s = 0;
    f.c.producer.max_connections_per_address = 2;
    cfg_rewrite(&f.c, f.cfgpath);
    hup(f.pid, f.log, "configuration reloaded from", 1);
    int64_t refused0 = sale_metric(mport, "seckill_producer_limited_total{reason=\"connections\"}");

    for (int i = 0; i < 2; i++)
        assert_true((held[i] = connect_from("127.0.0.4", port)) >= 0);
    /* libmicrohttpd accepts in order: the third is past the cap. The kernel
     * completes its handshake; the producer closes it unread. */
    assert_int_equal(front_get("127.0.0.4", port, u, item, NULL, &r), -1);
    assert_int_equal(front_get("127.0.0.5", port, u, item, NULL, &r), 200);
    assert_true(sale_metric(mport, "seckill_producer_limited_total{reason=\"connections\"}") > refused0);
    /* the trusted proxy carries every client behind it: not capped */
    for (int i = 0; i < 3; i++)
        assert_true((lb[i] = connect_from("127.0.0.9", port)) >= 0);
    assert_int_equal(front_get("127.0.0.9", port, u, item, "198.51.100.9", &r), 200);
    /* one closed: 127.0.0.4 may open one again */
    close(held[0]);
    WAIT_UNTIL(front_get("127.0.0.4", port, u, item, NULL, &r) == 200, 5000, ok);
    assert_true(ok);
    close(held[1]);
    for (int i = 0; i < 3; i++)
        close(lb[i]);
    front_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokens),
        cmocka_unit_test(test_key_rotation),
        cmocka_unit_test(test_http_hygiene),
        cmocka_unit_test(test_front_door_rates),
        cmocka_unit_test(test_front_door_connections),
        cmocka_unit_test(test_status_lifecycle),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_unknown_outcome),
        cmocka_unit_test(test_window_end),
        cmocka_unit_test(test_window_opening),
        cmocka_unit_test(test_restamp_at_opening),
        cmocka_unit_test(test_item_show),
    };
    return cmocka_run_group_tests_name("buyer", tests, setup, teardown);
}
