/* seckill-producer against the real stack: the sale's arithmetic, one unit
 * per user under concurrency, the HTTP edge, load shedding, a slow client,
 * Kafka down (units given back), and an orphaned reservation after SIGKILL
 * re-published by the sweeper; units added to a sold-out item, a paused
 * sale (issue #57). */
#include "harness.h"

#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bucket.h"
#include "keys.h"
#include "order.h"
#include "ordersig.h"
#include "sale.h"

#define PARTS_MAX 64

/* A running producer: its config file, port, log and pid. */
struct prod {
    struct cfg c;
    char cfgpath[128];
    char log[128];
    int port;  /* the buyers' */
    int mport; /* the operators': /metrics */
    pid_t pid;
    int sweep_age_ms; /* 0: 1000, which the producer raises to 6 s */
};

static struct prod main_prod;

static int healthz(int port)
{
    return harness_http(port, "GET", "/healthz", NULL, NULL, NULL, 0);
}

/* Configure (same Redis prefix as the suite) and start a producer; wait until
 * /healthz says Redis and Kafka are up, or only until it answers at all when
 * Kafka is expected to be down. */
static void prod_start(struct prod *p, int max_inflight, bool want_healthy)
{
    char bin[512];
    bool ok;
    harness_cfg(&p->c);
    free(p->c.redis.key_prefix);
    p->c.redis.key_prefix = strdup(harness_conf.redis.key_prefix);
    harness_producer_ports(&p->c);
    p->port = p->c.producer.port;
    p->mport = p->c.producer.metrics_port;
    p->c.producer.max_inflight = max_inflight;
    p->c.producer.connection_timeout_s = 1;
    /* 1000 is raised to 2 x message.timeout.ms + 2 s by the producer. */
    p->c.producer.sweep_age_ms = p->sweep_age_ms ? p->sweep_age_ms : 1000;
    p->c.producer.sweep_interval_ms = 200;
    p->c.producer.drain_timeout_ms = 10000;
    /* A buyer waits at most this long for Kafka; keeps the outage test short. */
    harness_props_set(&p->c.kafka.producer_properties, "message.timeout.ms", "2000");
    harness_cfg_file(&p->c, p->cfgpath, sizeof(p->cfgpath));
    snprintf(p->log, sizeof(p->log), "/tmp/seckill-test-producer-%d.log", p->port);
    unlink(p->log); /* a fresh port's log: an earlier run on that port left its lines */
    harness_bin("seckill-producer", bin, sizeof(bin));
    char *argv[] = { bin, "-c", p->cfgpath, NULL };
    p->pid = harness_spawn(argv, p->log);
    if (want_healthy)
        WAIT_UNTIL(healthz(p->port) == 200, 30000, ok);
    else
        WAIT_UNTIL(healthz(p->port) > 0, 30000, ok);
    if (!ok)
        fail_msg("producer on port %d did not come up; see %s", p->port, p->log);
    /* The operators' listener opens after the buyers': a test that reads
     * /metrics right away would otherwise race it (seen under TSan). */
    WAIT_UNTIL(healthz(p->mport) > 0, 30000, ok);
    if (!ok)
        fail_msg("producer's /metrics on port %d did not come up; see %s", p->mport, p->log);
}

/* SIGTERM: a clean stop exits 0. */
static void prod_stop(struct prod *p)
{
    assert_int_equal(kill(p->pid, SIGTERM), 0);
    int st = harness_wait_exit(p->pid, 30000);
    if (st != 0)
        fail_msg("producer exit status %d after SIGTERM; see %s", st, p->log);
    unlink(p->cfgpath);
    cfg_free(&p->c);
}

static int64_t new_item(int64_t stock)
{
    return harness_item_create(main_prod.cfgpath, 900000000 + (int64_t)util_rand_below(99999999), stock);
}

/* An item of stock units in k buckets (seckillctl item create --buckets). */
static int64_t new_bucketed_item(int64_t stock, int k)
{
    char ctl[512], id[24], st[24], sk[16];
    int64_t item = 900000000 + (int64_t)util_rand_below(99999999);
    harness_bin("seckillctl", ctl, sizeof(ctl));
    snprintf(id, sizeof(id), "%" PRId64, item);
    snprintf(st, sizeof(st), "%" PRId64, stock);
    snprintf(sk, sizeof(sk), "%d", k);
    char *argv[] = { ctl, "-c", main_prod.cfgpath, "item", "create", "--id", id, "--stock", st, "--buckets", sk,
                     NULL };
    assert_int_equal(harness_wait_exit(harness_spawn(argv, "/dev/null"), 30000), 0);
    return item;
}

/* GET of a stock in one of the item's slots (a bucket's salt, or BUCKET_HOME). */
static long long slot_stock(int64_t item, int salt)
{
    char key[KEYS_MAX];
    redisContext *rc = harness_redis(&harness_conf);
    keys_item_at(key, sizeof(key), harness_conf.redis.key_prefix, item, salt, KEYS_ITEM_STOCK);
    long long v = harness_int(rc, "GET %s", key);
    redisFree(rc);
    return v;
}

static long long item_key_int(int64_t item, enum keys_item_part part, const char *cmd)
{
    char key[KEYS_MAX];
    redisContext *rc = harness_redis(&harness_conf);
    keys_item(key, sizeof(key), harness_conf.redis.key_prefix, item, part);
    long long v = harness_int(rc, "%s %s", cmd, key);
    redisFree(rc);
    return v;
}


/* Claim item's unpublished reservations as a sweeper does
 * (seckill_sweep_claim, every one reserved by now); how many it claimed. */
static long long claim_by_hand(int64_t item)
{
    char k[KEYS_ITEM_PARTS][KEYS_MAX];
    long long now = (long long)util_wall_ms(), n;
    redisContext *rc = harness_redis(&harness_conf);
    keys_item_all(k, harness_conf.redis.key_prefix, item);
    redisReply *r = harness_cmd(rc, "FCALL seckill_sweep_claim 2 %s %s %lld %lld 100", k[KEYS_ITEM_UNPUB],
                                k[KEYS_ITEM_PENDING], now, now);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    n = (long long)r->elements / 2;
    freeReplyObject(r);
    redisFree(rc);
    return n;
}

#define UNKNOWN_REFUSED "seckill_producer_refused_unknown_total"

/* --- reading the topic back ------------------------------------------- */

struct topic_mark {
    int n;
    int64_t high[PARTS_MAX];
};

static rd_kafka_t *topic_consumer(void)
{
    char err[512];
    rd_kafka_conf_t *conf = harness_kafka_conf(&harness_conf, "admin");
    assert_int_equal(rd_kafka_conf_set(conf, "group.id", "seckill-test-reader", err, sizeof(err)), RD_KAFKA_CONF_OK);
    assert_int_equal(rd_kafka_conf_set(conf, "enable.auto.commit", "false", err, sizeof(err)), RD_KAFKA_CONF_OK);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
    assert_non_null(rk);
    return rk;
}

static int partitions(rd_kafka_t *rk)
{
    const struct rd_kafka_metadata *md;
    rd_kafka_topic_t *t = rd_kafka_topic_new(rk, harness_conf.kafka.topic, NULL);
    assert_int_equal(rd_kafka_metadata(rk, 0, t, &md, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
    int n = md->topics[0].partition_cnt;
    rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(t);
    assert_true(n > 0 && n <= PARTS_MAX);
    return n;
}

/* The end offsets now: messages after the mark are this test's. */
static void topic_mark(struct topic_mark *m)
{
    rd_kafka_t *rk = topic_consumer();
    int64_t lo;
    m->n = partitions(rk);
    for (int p = 0; p < m->n; p++)
        assert_int_equal(rd_kafka_query_watermark_offsets(rk, harness_conf.kafka.topic, p, &lo,
                                                          &m->high[p], 10000),
                         RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_destroy(rk);
}

/* The key id of the last order topic_orders read. */
static char last_kid[KEYRING_KID_MAX + 1];

/* Read every message after the mark up to the current end; collect the
 * order ids of item's orders into ids (up to max), each of which a
 * producer key must have signed (the test's own keys, osig_verify).
 * Returns how many. */
static int topic_orders(const struct topic_mark *m, int64_t item, int64_t *ids, int max)
{
    rd_kafka_t *rk = topic_consumer();
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(m->n);
    int64_t end[PARTS_MAX], lo, done = 0;
    int found = 0;
    for (int p = 0; p < m->n; p++) {
        assert_int_equal(rd_kafka_query_watermark_offsets(rk, harness_conf.kafka.topic, p, &lo, &end[p], 10000),
                         RD_KAFKA_RESP_ERR_NO_ERROR);
        rd_kafka_topic_partition_list_add(l, harness_conf.kafka.topic, p)->offset = m->high[p];
        if (end[p] <= m->high[p])
            done++;
    }
    assert_int_equal(rd_kafka_assign(rk, l), RD_KAFKA_RESP_ERR_NO_ERROR);
    int64_t deadline = util_mono_ms() + 30000;
    while (done < m->n && util_mono_ms() < deadline) {
        rd_kafka_message_t *msg = rd_kafka_consumer_poll(rk, 200);
        if (!msg)
            continue;
        if (!msg->err) {
            struct order o;
            char err[128];
            if (order_decode(msg->payload, msg->len, &o, err, sizeof(err)) == 0 && o.item_id == item &&
                found < max) {
                char key[24];
                /* Keyed by user: one user's orders stay in one partition. */
                snprintf(key, sizeof(key), "%lld", (long long)o.user_id);
                assert_int_equal((int)msg->key_len, (int)strlen(key));
                assert_memory_equal(msg->key, key, msg->key_len);
                /* #45 §1: signed, the sweeper's re-published ones too. */
                if (osig_verify(&o, err, sizeof(err)) != KEYRING_OK)
                    fail_msg("order %lld: %s", (long long)o.order_id, err);
                snprintf(last_kid, sizeof(last_kid), "%.*s", (int)strcspn(o.sig, ":"), o.sig);
                ids[found++] = o.order_id;
            }
            if (msg->offset + 1 >= end[msg->partition])
                done++;
        }
        rd_kafka_message_destroy(msg);
    }
    assert_true(done >= m->n);
    rd_kafka_topic_partition_list_destroy(l);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return found;
}

/* --- concurrent buyers -------------------------------------------------- */

struct shot {
    int port;
    int64_t user, item;
    int status;
    int64_t order_id;
};

static int64_t order_id_of(const char *resp)
{
    const char *id = strstr(resp, "\"order_id\":\"");
    return id ? strtoll(id + 12, NULL, 10) : 0;
}

static void *fire(void *arg)
{
    struct shot *s = arg;
    char resp[256];
    s->status = harness_order(s->port, s->user, s->item, resp, sizeof(resp));
    s->order_id = order_id_of(resp);
    return NULL;
}

struct volley {
    struct shot *shots;
    int from, to, step;
};

static void *fire_many(void *arg)
{
    struct volley *v = arg;
    for (int i = v->from; i < v->to; i += v->step)
        fire(&v->shots[i]);
    return NULL;
}

static void fire_all(struct shot *shots, int n, int threads)
{
    pthread_t th[128];
    struct volley v[128];
    assert_true(threads <= 128);
    for (int t = 0; t < threads; t++) {
        v[t] = (struct volley){ shots, t, n, threads };
        assert_int_equal(pthread_create(&th[t], NULL, fire_many, &v[t]), 0);
    }
    for (int t = 0; t < threads; t++)
        pthread_join(th[t], NULL);
}

/* --- the tests ---------------------------------------------------------- */

static int setup(void **state)
{
    harness_setup(state);
    prod_start(&main_prod, 20000, true);
    return 0;
}

static int teardown(void **state)
{
    prod_stop(&main_prod);
    return harness_teardown(state);
}

/* 50 units, 300 requests from 200 users with repeats. */
static void test_sale_arithmetic(void **state)
{
    (void)state;
    enum { STOCK = 50, USERS = 200, REQS = 300 };
    static struct shot shots[REQS];
    struct topic_mark mark;
    int64_t item = new_item(STOCK), ids[REQS];
    int n202 = 0, n409 = 0, n410 = 0, other = 0;
    topic_mark(&mark);
    for (int i = 0; i < REQS; i++)
        shots[i] = (struct shot){ main_prod.port, 1 + (i % USERS), item, 0, 0 };
    fire_all(shots, REQS, 16);
    for (int i = 0; i < REQS; i++) {
        switch (shots[i].status) {
        case 202: n202++; break;
        case 409: n409++; break;
        case 410: n410++; break;
        default: other++; print_error("unexpected status %d\n", shots[i].status);
        }
    }
    assert_int_equal(n202, STOCK);
    assert_int_equal(other, 0);
    assert_int_equal(n202 + n409 + n410, REQS);
    /* Winners are distinct users; every 409 belongs to a winner. */
    for (int i = 0; i < REQS; i++) {
        if (shots[i].status == 202)
            for (int j = i + 1; j < REQS; j++)
                assert_false(shots[j].status == 202 && shots[j].user == shots[i].user);
        if (shots[i].status == 409) {
            bool won = false;
            for (int j = 0; j < REQS; j++)
                won |= shots[j].status == 202 && shots[j].user == shots[i].user;
            assert_true(won);
        }
    }
    /* After the sale, a new buyer hears sold out. */
    assert_int_equal(harness_order(main_prod.port, 999999, item, NULL, 0), 410);
    assert_int_equal(item_key_int(item, KEYS_ITEM_STOCK, "GET"), 0);
    assert_int_equal(item_key_int(item, KEYS_ITEM_BUYERS, "SCARD"), STOCK);
    assert_int_equal(item_key_int(item, KEYS_ITEM_PENDING, "HLEN"), STOCK);
    bool marked;
    WAIT_UNTIL(item_key_int(item, KEYS_ITEM_UNPUB, "ZCARD") == 0, 5000, marked);
    assert_true(marked);
    /* Exactly the accepted orders are on the topic, once each. */
    int n = topic_orders(&mark, item, ids, REQS);
    assert_int_equal(n, STOCK);
    for (int i = 0; i < REQS; i++) {
        if (shots[i].status != 202)
            continue;
        int seen = 0;
        for (int k = 0; k < n; k++)
            seen += ids[k] == shots[i].order_id;
        assert_int_equal(seen, 1);
    }
}

/* One user, 100 concurrent requests: one unit. */
static void test_one_user_hammering(void **state)
{
    (void)state;
    enum { N = 100 };
    static struct shot shots[N];
    pthread_t th[N];
    int64_t item = new_item(10);
    int n202 = 0, n409 = 0;
    for (int i = 0; i < N; i++) {
        shots[i] = (struct shot){ main_prod.port, 4242, item, 0, 0 };
        assert_int_equal(pthread_create(&th[i], NULL, fire, &shots[i]), 0);
    }
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < N; i++) {
        n202 += shots[i].status == 202;
        n409 += shots[i].status == 409;
    }
    assert_int_equal(n202, 1);
    assert_int_equal(n409, N - 1);
    assert_int_equal(item_key_int(item, KEYS_ITEM_STOCK, "GET"), 9);
}

static void test_http_edge(void **state)
{
    (void)state;
    char resp[512], big[4096];
    int port = main_prod.port;
    int64_t item = new_item(3);
    assert_int_equal(harness_http(port, "POST", "/api/v1/seckill", "text/plain",
                                  "{\"user_id\":1,\"item_id\":1}", resp, sizeof(resp)), 400);
    assert_non_null(strstr(resp, "\"status\":\"bad_request\""));
    assert_non_null(strstr(resp, "content type"));
    assert_int_equal(harness_http(port, "POST", "/api/v1/seckill", "application/json", "{\"user_id\":1,",
                                  resp, sizeof(resp)), 400);
    assert_non_null(strstr(resp, "malformed JSON"));
    assert_int_equal(harness_http(port, "POST", "/api/v1/seckill", "application/json",
                                  "{\"user_id\":-1,\"item_id\":1}", resp, sizeof(resp)), 400);
    assert_non_null(strstr(resp, "user_id must be positive"));
    memset(big, ' ', sizeof(big) - 1);
    big[sizeof(big) - 1] = 0;
    big[0] = '{';
    memcpy(big + sizeof(big) - 3, "}\n", 2);
    assert_int_equal(harness_http(port, "POST", "/api/v1/seckill", "application/json", big, resp, sizeof(resp)), 400);
    assert_non_null(strstr(resp, "body too large"));
    assert_int_equal(harness_http(port, "GET", "/api/v1/seckill", NULL, NULL, resp, sizeof(resp)), 405);
    assert_int_equal(harness_http(port, "GET", "/nope", NULL, NULL, resp, sizeof(resp)), 404);
    assert_non_null(strstr(resp, "not_found"));
    /* Bad requests kept nothing. */
    assert_int_equal(item_key_int(item, KEYS_ITEM_STOCK, "GET"), 3);
    assert_int_equal(harness_order(port, 5, 1, resp, sizeof(resp)), 404);
    assert_non_null(strstr(resp, "unknown_item"));
    assert_int_equal(harness_order(port, 5, item, resp, sizeof(resp)), 202);
    assert_non_null(strstr(resp, "\"status\":\"accepted\""));

    /* The buyers' port serves no /metrics; the operators' listener does,
     * and /healthz too, and nothing else. */
    assert_int_equal(harness_http(port, "GET", "/metrics", NULL, NULL, resp, sizeof(resp)), 404);
    assert_non_null(strstr(resp, "not_found"));
    assert_int_equal(harness_http(main_prod.mport, "GET", "/healthz", NULL, NULL, resp, sizeof(resp)), 200);
    assert_non_null(strstr(resp, "\"redis\":\"up\",\"kafka\":\"up\""));
    assert_int_equal(harness_http(main_prod.mport, "GET", "/api/v1/orders/1", NULL, NULL, resp, sizeof(resp)), 404);
    assert_int_equal(harness_http(main_prod.mport, "POST", "/api/v1/seckill", "application/json",
                                  "{\"user_id\":6,\"item_id\":1}", resp, sizeof(resp)), 405);

    /* /metrics parses as Prometheus text and counts what we saw. */
    static char m[1 << 18]; /* the whole page: a line cut short would not parse */
    assert_int_equal(harness_http(main_prod.mport, "GET", "/metrics", NULL, NULL, m, sizeof(m)), 200);
    char *save, *line;
    int samples = 0;
    for (line = strtok_r(m, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#') {
            assert_true(strncmp(line, "# HELP ", 7) == 0 || strncmp(line, "# TYPE ", 7) == 0);
            continue;
        }
        char name[256];
        double v;
        /* name{labels} value | name value */
        assert_int_equal(sscanf(line, "%255[a-zA-Z0-9_:]", name), 1);
        const char *val = strrchr(line, ' ');
        assert_non_null(val);
        assert_int_equal(sscanf(val, " %lf", &v), 1);
        assert_true(strncmp(name, "seckill_producer_", 17) == 0);
        samples++;
    }
    assert_true(samples > 20);
}

static void test_slow_client_cannot_stall(void **state)
{
    (void)state;
    char buf[64];
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = { 0 };
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)main_prod.port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    const char *partial = "POST /api/v1/seckill HTTP/1.1\r\nHost: x\r\n";
    assert_int_equal(write(fd, partial, strlen(partial)), (ssize_t)strlen(partial));
    /* Others are served meanwhile. */
    int64_t t0 = util_mono_ms();
    assert_int_equal(healthz(main_prod.port), 200);
    assert_true(util_mono_ms() - t0 < 1000);
    /* The idle half-request is cut off after connection_timeout_s (1 s). */
    struct timeval tv = { 10, 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ssize_t r = read(fd, buf, sizeof(buf));
    assert_true(r <= 0 || util_mono_ms() - t0 < 10000);
    assert_true(util_mono_ms() - t0 < 9000);
    close(fd);
}

/* #45 §1: the producer signs with the first key of kafka.order_keys; a
 * SIGHUP with a new key put first moves it to that key, without a restart. */
static void test_order_key_reload(void **state)
{
    (void)state;
    struct prod p;
    struct topic_mark mark;
    char k2[128], entry[160], fresh[256], err[512], resp[256];
    int64_t ids[2], item = new_item(10);
    bool ok;
    memset(&p, 0, sizeof(p));
    prod_start(&p, 1000, true);
    topic_mark(&mark);
    assert_int_equal(harness_order(p.port, 880001, item, resp, sizeof(resp)), 202);
    assert_int_equal(topic_orders(&mark, item, ids, 2), 1);
    assert_string_equal(last_kid, "k1");

    snprintf(k2, sizeof(k2), "/tmp/sktest-producer-k2-%d", (int)getpid());
    harness_write_secret(k2, "the producer test's second order key, 32 bytes or more");
    snprintf(entry, sizeof(entry), "k2:%s", k2);
    struct cfg_list *l = &p.c.kafka.order_keys;
    char **v = calloc(l->n + 1, sizeof(*v));
    assert_non_null(v);
    assert_non_null(v[0] = strdup(entry));
    memcpy(v + 1, l->v, l->n * sizeof(*v));
    free(l->v);
    l->v = v;
    l->n++;
    harness_cfg_file(&p.c, fresh, sizeof(fresh));
    assert_int_equal(rename(fresh, p.cfgpath), 0);
    assert_int_equal(kill(p.pid, SIGHUP), 0);
    WAIT_UNTIL(harness_file_has(p.log, "orders are signed with key id k2"), 20000, ok);
    assert_true(ok);
    /* The test verifies with both keys from here on, as a consumer would. */
    if (osig_load(&p.c, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    topic_mark(&mark);
    assert_int_equal(harness_order(p.port, 880002, item, resp, sizeof(resp)), 202);
    assert_int_equal(topic_orders(&mark, item, ids, 2), 1);
    assert_string_equal(last_kid, "k2");
    prod_stop(&p);
    if (osig_load(&harness_conf, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    unlink(k2);
}

/* Kafka stopped: an order that never reached it is refused and its unit
 * given back; beyond max_inflight the producer sheds with 429; a reservation
 * orphaned by SIGKILL is re-published by the next producer's sweeper. */
static void test_kafka_down_and_orphans(void **state)
{
    (void)state;
    /* b's sweeper must not claim the order of step 1 before its give-back:
     * a claim (rightly) keeps the unit, and under TSan on a busy machine the
     * give-back once came after the 6 s age. c2's sweeper keeps the age. */
    struct prod b = { .sweep_age_ms = 120000 }, c2 = { 0 };
    struct topic_mark mark;
    pthread_t th;
    int64_t item = new_item(5), ids[8];
    char cmd[1024];
    bool ok;
    struct shot s1 = { 0 }, s3 = { 0 };

    prod_start(&b, 1, true);
    topic_mark(&mark);
    snprintf(cmd, sizeof(cmd), "'%s/scripts/stack' stop kafka >/dev/null", harness_root());
    assert_int_equal(system(cmd), 0);
    /* Until the producer has seen the broker gone, an order could still be
     * on a connection the broker is closing: "possibly persisted", kept for
     * the sweeper, not the certain refusal step 1 is about. */
    WAIT_UNTIL(sale_metric(b.mport, "seckill_producer_kafka_up") == 0, 10000, ok);
    assert_true(ok);

    /* 1. Not persisted: 503 "unavailable", and the unit is back before the
     * answer. The main producer's sweeper (age 6 s) may claim the
     * reservation before Kafka's refusal comes (CI's ASan run saw it once):
     * then the unit is kept, as it may become an order, and its buyer hears
     * "unknown" with the order id (step 1b does that on purpose); the next
     * buyer tries. */
    long long unknown0 = sale_metric(b.mport, UNKNOWN_REFUSED), kept1 = 0;
    for (int64_t buyer = 111;; buyer++) {
        assert_true(buyer < 115);
        s1 = (struct shot){ b.port, buyer, item, 0, 0 };
        assert_int_equal(pthread_create(&th, NULL, fire, &s1), 0);
        WAIT_UNTIL(item_key_int(item, KEYS_ITEM_STOCK, "GET") == 4 - kept1, 5000, ok);
        assert_true(ok);
        /* 2. The one request in flight fills max_inflight = 1: shed. */
        assert_int_equal(harness_order(b.port, 222, item, NULL, 0), 429);
        pthread_join(th, NULL);
        assert_int_equal(s1.status, 503);
        if (s1.order_id == 0)
            break;
        kept1++;
        assert_int_equal(sale_metric(b.mport, UNKNOWN_REFUSED), unknown0 + kept1);
    }
    assert_int_equal(sale_metric(b.mport, UNKNOWN_REFUSED), unknown0 + kept1);
    assert_int_equal(item_key_int(item, KEYS_ITEM_STOCK, "GET"), 5 - kept1);
    assert_int_equal(item_key_int(item, KEYS_ITEM_BUYERS, "SCARD"), kept1);
    assert_int_equal(item_key_int(item, KEYS_ITEM_PENDING, "HLEN"), kept1);
    assert_int_equal(item_key_int(item, KEYS_ITEM_UNPUB, "ZCARD"), kept1);

    /* 1b. A sweeper claims the reservation before Kafka's refusal comes (by
     * hand, as seckill_sweep_claim runs it): the give-back is refused, so
     * the buyer hears "unknown" with the order id, and once Kafka is back
     * the order is published (below): not "unavailable" for an order made. */
    int64_t claimed_item = new_item(5);
    struct shot s1b = { b.port, 555, claimed_item, 0, 0 };
    assert_int_equal(pthread_create(&th, NULL, fire, &s1b), 0);
    WAIT_UNTIL(item_key_int(claimed_item, KEYS_ITEM_PENDING, "HLEN") == 1, 5000, ok);
    assert_true(ok);
    assert_int_equal(claim_by_hand(claimed_item), 1);
    pthread_join(th, NULL);
    assert_int_equal(s1b.status, 503);
    assert_true(s1b.order_id > 0);
    assert_int_equal(sale_metric(b.mport, UNKNOWN_REFUSED), unknown0 + kept1 + 1);
    assert_int_equal(item_key_int(claimed_item, KEYS_ITEM_STOCK, "GET"), 4);
    assert_int_equal(item_key_int(claimed_item, KEYS_ITEM_PENDING, "HLEN"), 1);

    /* 2b. The same in an item of two buckets (issue #57; one primary: salts
     * 0 and 1): the buyer's bucket was refilled with all 5 units, and the
     * unit given back there goes on to the reserve, by a transfer. Another
     * producer's sweeper may claim the reservation before Kafka's refusal
     * comes (its age is 6 s, and a refusal took 7.6 s once): then the unit
     * is rightly kept for it, and the next buyer tries. */
    int64_t bk_item = new_bucketed_item(5, 2), buyer = 444;
    long long kept0 = sale_metric(b.mport, "seckill_producer_restore_kept_total"), held = 0;
    for (bool given = false; !given && buyer < 448; buyer++) {
        long long restored0 = sale_metric(b.mport, "seckill_producer_restored_total");
        assert_int_equal(harness_order(b.port, buyer, bk_item, NULL, 0), 503);
        WAIT_UNTIL(sale_metric(b.mport, "seckill_producer_restored_total") > restored0 ||
                       sale_metric(b.mport, "seckill_producer_restore_kept_total") - kept0 > held,
                   20000, ok);
        assert_true(ok);
        given = sale_metric(b.mport, "seckill_producer_restored_total") > restored0;
        held = sale_metric(b.mport, "seckill_producer_restore_kept_total") - kept0;
    }
    WAIT_UNTIL(sale_metric(b.mport, "seckill_producer_bucket_given_back_units_total") == 1, 20000, ok);
    if (!ok)
        fail_msg("no unit sent on to the reserve: reserve %lld, buckets %lld and %lld; see %s",
                 slot_stock(bk_item, BUCKET_HOME), slot_stock(bk_item, 0), slot_stock(bk_item, 1), b.log);
    assert_int_equal(slot_stock(bk_item, BUCKET_HOME), 1);
    assert_int_equal(slot_stock(bk_item, 0) + slot_stock(bk_item, 1), 4 - held);

    /* 3. Reserved, then the producer dies before Kafka answers. */
    s3 = (struct shot){ b.port, 333, item, 0, 0 };
    assert_int_equal(pthread_create(&th, NULL, fire, &s3), 0);
    WAIT_UNTIL(item_key_int(item, KEYS_ITEM_PENDING, "HLEN") == 1, 5000, ok);
    assert_true(ok);
    assert_int_equal(kill(b.pid, SIGKILL), 0);
    assert_int_equal(harness_wait_exit(b.pid, 10000), 128 + SIGKILL);
    pthread_join(th, NULL);
    assert_int_equal(s3.status, -1); /* the connection died with it */
    unlink(b.cfgpath);
    cfg_free(&b.c);
    assert_int_equal(item_key_int(item, KEYS_ITEM_STOCK, "GET"), 4 - kept1);
    assert_int_equal(item_key_int(item, KEYS_ITEM_UNPUB, "ZCARD"), 1 + kept1);

    snprintf(cmd, sizeof(cmd), "'%s/scripts/stack' up >/dev/null", harness_root());
    assert_int_equal(system(cmd), 0);
    /* A new producer's sweeper finds the orphan and publishes it (and the
     * reservations a sweeper claimed in steps 1 and 1b). */
    prod_start(&c2, 100, true);
    WAIT_UNTIL(item_key_int(item, KEYS_ITEM_UNPUB, "ZCARD") == 0 &&
                   item_key_int(claimed_item, KEYS_ITEM_UNPUB, "ZCARD") == 0,
               30000, ok);
    assert_true(ok);
    assert_int_equal(topic_orders(&mark, item, ids, 8), 1 + kept1);
    assert_int_equal(topic_orders(&mark, claimed_item, ids, 8), 1);
    assert_int_equal(ids[0], s1b.order_id);
    /* Still reserved (the consumer clears it once persisted), never given back. */
    assert_int_equal(item_key_int(item, KEYS_ITEM_PENDING, "HLEN"), 1 + kept1);
    assert_int_equal(item_key_int(item, KEYS_ITEM_STOCK, "GET"), 4 - kept1);
    prod_stop(&c2);
}


/* --- sold out, answered by the producer itself (producer/soldout.h) ----- */

/* A buy that must be answered status (a 410 also by the word sold_out). */
static void expect_order(int port, int64_t user, int64_t item, int status)
{
    char resp[256];
    int got = harness_order(port, user, item, resp, sizeof(resp));
    if (got != status)
        fail_msg("user %lld, item %lld: %d %s, expected %d", (long long)user, (long long)item, got, resp, status);
    if (status == 410)
        assert_non_null(strstr(resp, "\"sold_out\""));
}

/* One PING answered (frees nothing: the caller owns rc). */
static bool redis_pings(redisContext *rc)
{
    redisReply *r = redisCommand(rc, "PING");
    bool ok = r && r->type == REDIS_REPLY_STATUS;
    if (r)
        freeReplyObject(r);
    return ok;
}

/* True once a buy of item by user is answered 410 by the producer itself. */
static bool answered_locally(const struct prod *p, int64_t user, int64_t item)
{
    int64_t before = sale_metric(p->mport, "seckill_producer_sold_out_local_total");
    return harness_order(p->port, user, item, NULL, 0) == 410 &&
           sale_metric(p->mport, "seckill_producer_sold_out_local_total") > before;
}

/* Once Redis said sold out, the crowd is answered without it: the answers
 * are counted as local, they still come while every Redis client is
 * paused, and a buyer who holds a unit still hears 409 (from Redis). */
static void test_sold_out_locally(void **state)
{
    (void)state;
    struct prod *p = &main_prod;
    int64_t item = new_item(2), local0;
    redisContext *rc;
    bool ok;
    expect_order(p->port, 1, item, 202);
    expect_order(p->port, 2, item, 202);
    expect_order(p->port, 3, item, 410); /* Redis's answer: the producer learns it */
    WAIT_UNTIL(answered_locally(p, 4, item), 10000, ok);
    assert_true(ok);
    local0 = sale_metric(p->mport, "seckill_producer_sold_out_local_total");
    for (int64_t u = 100; u < 120; u++)
        expect_order(p->port, u, item, 410);
    assert_int_equal(sale_metric(p->mport, "seckill_producer_sold_out_local_total"), local0 + 20);
    expect_order(p->port, 1, item, 409);
    expect_order(p->port, 2, item, 409);
    assert_int_equal(sale_metric(p->mport, "seckill_producer_sold_out_local_total"), local0 + 20);

    /* Redis paused for every client (CLIENT UNPAUSE would wait too): the
     * sold-out crowd is still answered, by the producer alone. */
    /* A connection without a timeout, authenticated before the pause (which
     * holds AUTH too): its PING is answered when the pause ends, so the next
     * test finds Redis serving. */
    redisContext *waiter = harness_redis(&harness_conf);
    assert_int_equal(redisSetTimeout(waiter, (struct timeval){ 0, 0 }), REDIS_OK);
    rc = harness_redis(&harness_conf);
    freeReplyObject(harness_cmd(rc, "CLIENT PAUSE 3000 ALL"));
    redisFree(rc);
    for (int64_t u = 200; u < 210; u++)
        expect_order(p->port, u, item, 410);
    assert_true(redis_pings(waiter));
    redisFree(waiter);
    assert_int_equal(sale_metric(p->mport, "seckill_producer_sold_out_local_total"), local0 + 30);
}

/* Give user's unit of item back as a producer does when Kafka refuses its
 * order (seckill_restore, run by hand: any producer may be the one). */
static void give_back_by_hand(int64_t item, int64_t user_id, int64_t order_id)
{
    char k[KEYS_ITEM_PARTS][KEYS_MAX], oid[24], user[24];
    redisContext *rc = harness_redis(&harness_conf);
    redisReply *r;
    keys_item_all(k, harness_conf.redis.key_prefix, item);
    snprintf(oid, sizeof(oid), "%lld", (long long)order_id);
    snprintf(user, sizeof(user), "%lld", (long long)user_id);
    r = harness_cmd(rc, "ZSCORE %s %s", k[KEYS_ITEM_UNPUB], oid);
    if (r->type != REDIS_REPLY_STRING) {
        /* Published already: put it back as unpublished, as it is in the
         * moment seckill_restore is for (stamped now: the sweeper leaves it). */
        freeReplyObject(r);
        freeReplyObject(harness_cmd(rc, "ZADD %s %lld %s", k[KEYS_ITEM_UNPUB], (long long)util_wall_ms(), oid));
        r = harness_cmd(rc, "ZSCORE %s %s", k[KEYS_ITEM_UNPUB], oid);
    }
    char score[32];
    snprintf(score, sizeof(score), "%s", r->str);
    freeReplyObject(r);
    r = harness_cmd(rc, "FCALL seckill_restore 5 %s %s %s %s %s %s %s %s", k[KEYS_ITEM_STOCK],
                    k[KEYS_ITEM_BUYERS], k[KEYS_ITEM_PENDING], k[KEYS_ITEM_UNPUB], k[KEYS_ITEM_ORDERS], user,
                    oid, score);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    redisFree(rc);
}

/* A unit that comes back (here as the producer gives one back when Kafka
 * refuses an order: seckill_restore, run by hand) is for sale again within a
 * refresh period, and after it sells again the new holder is told 409 and
 * the one who gave it back 410. */
static void test_sold_out_unit_back(void **state)
{
    (void)state;
    struct prod *p = &main_prod;
    char resp[256];
    int64_t item = new_item(1), order_id;
    bool ok;
    int st;
    assert_int_equal(harness_order(p->port, 7, item, resp, sizeof(resp)), 202);
    order_id = order_id_of(resp);
    expect_order(p->port, 8, item, 410);
    WAIT_UNTIL(answered_locally(p, 9, item), 10000, ok);
    assert_true(ok);
    give_back_by_hand(item, 7, order_id);

    /* Back in stock: a new buyer gets it within a refresh period. */
    WAIT_UNTIL((st = harness_order(p->port, 10, item, resp, sizeof(resp))) != 410, 10000, ok);
    assert_true(ok);
    assert_int_equal(st, 202);
    expect_order(p->port, 11, item, 410); /* Redis again: sold out */
    WAIT_UNTIL(answered_locally(p, 12, item), 10000, ok);
    assert_true(ok);
    expect_order(p->port, 10, item, 409); /* the new holder */
    expect_order(p->port, 7, item, 410);  /* gave it back: sold out for them now */
}

/* The unit comes back and sells again, in Redis, between two checks: the
 * stock and the number of buyers are as before; the given-back count is
 * what tells the producer to copy the buyers again, so the new holder is
 * told 409 within a refresh period (not only at the periodic resync). */
static void test_sold_out_given_back_between_checks(void **state)
{
    (void)state;
    struct prod p2 = { 0 };
    char resp[256], k[KEYS_ITEM_PARTS][KEYS_MAX];
    int64_t item = new_item(1);
    redisContext *rc = harness_redis(&harness_conf);
    bool ok;
    prod_start(&p2, 20000, true);
    assert_int_equal(harness_order(p2.port, 21, item, resp, sizeof(resp)), 202);
    expect_order(p2.port, 22, item, 410);
    WAIT_UNTIL(answered_locally(&p2, 23, item), 10000, ok);
    assert_true(ok);
    /* In one step, as no check can fall between: user 21 gives the unit
     * back, user 24 takes it. */
    keys_item_all(k, harness_conf.redis.key_prefix, item);
    freeReplyObject(harness_cmd(rc, "EVAL %s 3 %s %s %s",
                                "redis.call('SREM', KEYS[2], '21') redis.call('SADD', KEYS[2], '24') "
        "redis.call('HINCRBY', KEYS[3], 'given_back', 1) return 1",
        k[KEYS_ITEM_STOCK], k[KEYS_ITEM_BUYERS], k[KEYS_ITEM_ORDERS]));
    WAIT_UNTIL(harness_order(p2.port, 24, item, NULL, 0) == 409, 5000, ok);
    assert_true(ok);
    expect_order(p2.port, 21, item, 410);
    prod_stop(&p2);
    redisFree(rc);
}

/* seckillctl -c the main producer's configuration, with args (NULL-ended):
 * its exit status; what it printed goes to the test's output on failure. */
static int ctl(const char *const *args)
{
    char *out = NULL;
    const char *argv[24] = { "-c", main_prod.cfgpath };
    int n = 2;
    for (int i = 0; args[i] && n < 23; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    int st = harness_run(&out, "seckillctl", argv, 30000);
    if (st != 0)
        printf("# seckillctl exited %d: %s\n", st, out ? out : "");
    free(out);
    return st;
}

/* Units added to a sold-out item (seckillctl item add-stock) are for sale
 * within a refresh period, though the producer answered the item's buyers
 * from its own view: exactly the units added sell, then it is sold out
 * again. */
static void test_stock_added_after_sold_out(void **state)
{
    (void)state;
    struct prod *p = &main_prod;
    int64_t item = new_item(1);
    char id[24], chg[48];
    bool ok;
    int st;
    snprintf(id, sizeof(id), "%lld", (long long)item);
    snprintf(chg, sizeof(chg), "test-add-%lld", (long long)item);
    expect_order(p->port, 31, item, 202);
    expect_order(p->port, 32, item, 410);
    WAIT_UNTIL(answered_locally(p, 33, item), 10000, ok);
    assert_true(ok);
    assert_int_equal(ctl((const char *[]){ "item", "add-stock", "--id", id, "--units", "2", "--change-id", chg,
                                           NULL }), 0);
    WAIT_UNTIL((st = harness_order(p->port, 34, item, NULL, 0)) != 410, 10000, ok);
    assert_true(ok);
    assert_int_equal(st, 202);
    expect_order(p->port, 35, item, 202);
    expect_order(p->port, 36, item, 410);
    /* The same change again adds nothing. */
    assert_int_equal(ctl((const char *[]){ "item", "add-stock", "--id", id, "--units", "2", "--change-id", chg,
                                           NULL }), 0);
    assert_int_equal(item_key_int(item, KEYS_ITEM_STOCK, "GET"), 0);
}

struct crowd {
    struct shot *shots;
    int n;
};

static void *crowd_buys(void *arg)
{
    struct crowd *c = arg;
    fire_all(c->shots, c->n, 8);
    return NULL;
}

/* Withdrawals and additions while 400 buyers buy 100 units: each change
 * once, no unit both withdrawn and sold, every 202 holding a unit, Redis and
 * PostgreSQL agreeing at the end (reconcile clean, with the reservations
 * still on their way: no consumer runs here). */
static void test_stock_changes_racing_buys(void **state)
{
    (void)state;
    enum { STOCK = 100, BUYERS = 400 };
    static struct shot shots[BUYERS];
    int64_t item = new_item(STOCK), withdrawn = 0, added = 0;
    char id[24], chg[48];
    pthread_t th;
    snprintf(id, sizeof(id), "%lld", (long long)item);
    for (int i = 0; i < BUYERS; i++)
        shots[i] = (struct shot){ main_prod.port, 5000 + i, item, 0, 0 };
    struct crowd crowd = { shots, BUYERS };
    assert_int_equal(pthread_create(&th, NULL, crowd_buys, &crowd), 0);
    for (int k = 0; k < 6; k++) {
        bool add = k % 3 == 2;
        snprintf(chg, sizeof(chg), "race-%lld-%d", (long long)item, k);
        /* A withdrawal of more than is free is refused whole (exit 1). */
        if (ctl((const char *[]){ "item", add ? "add-stock" : "withdraw", "--id", id, "--units", "10",
                                  "--change-id", chg, NULL }) == 0)
            *(add ? &added : &withdrawn) += 10;
    }
    pthread_join(th, NULL);
    int n202 = 0;
    for (int i = 0; i < BUYERS; i++) {
        assert_true(shots[i].status == 202 || shots[i].status == 410);
        n202 += shots[i].status == 202;
    }
    int64_t total = STOCK - withdrawn + added;
    assert_int_equal(n202 + item_key_int(item, KEYS_ITEM_STOCK, "GET"), total);
    assert_int_equal(item_key_int(item, KEYS_ITEM_PENDING, "HLEN"), n202);
    assert_int_equal(ctl((const char *[]){ "reconcile", "--item", id, NULL }), 0);
    printf("# %d sold, %lld withdrawn, %lld added while buying\n", n202, (long long)withdrawn,
           (long long)added);
}

/* One buy on a fresh connection: its status, and whether the answer's head
 * holds want (a header line, "\r\n" included). */
static int order_with_header(int port, int64_t user, int64_t item, const char *want, bool *has)
{
    char req[256], buf[2048];
    int body = snprintf(buf, sizeof(buf), "{\"user_id\":%lld,\"item_id\":%lld}", (long long)user,
                        (long long)item);
    int n = snprintf(req, sizeof(req),
                     "POST /api/v1/seckill HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                     "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
                     body, buf);
    int fd = harness_connect(port), status = -1;
    size_t got = 0;
    *has = false;
    if (fd < 0)
        return -1;
    if (write(fd, req, (size_t)n) == n) {
        ssize_t r;
        while (got < sizeof(buf) - 1 && (r = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0)
            got += (size_t)r;
        buf[got] = 0;
        if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
            status = -1;
        char *end = strstr(buf, "\r\n\r\n");
        if (end)
            end[2] = 0;
        *has = strstr(buf, want) != NULL;
    }
    close(fd);
    return status;
}

/* seckillctl item pause: a buyer who holds no unit is told 503 paused with
 * Retry-After, one who holds a unit still 409, and nothing is reserved; item
 * resume sells again. */
static void test_paused(void **state)
{
    (void)state;
    struct prod *p = &main_prod;
    int64_t item = new_item(3);
    char id[24], resp[256];
    bool has;
    snprintf(id, sizeof(id), "%lld", (long long)item);
    expect_order(p->port, 41, item, 202);
    assert_int_equal(ctl((const char *[]){ "item", "pause", "--id", id, NULL }), 0);
    assert_int_equal(order_with_header(p->port, 42, item, "\r\nRetry-After: 5\r\n", &has), 503);
    assert_true(has);
    assert_int_equal(harness_order(p->port, 43, item, resp, sizeof(resp)), 503);
    assert_non_null(strstr(resp, "\"status\":\"paused\""));
    expect_order(p->port, 41, item, 409);
    assert_int_equal(item_key_int(item, KEYS_ITEM_STOCK, "GET"), 2);
    assert_int_equal(ctl((const char *[]){ "item", "resume", "--id", id, NULL }), 0);
    expect_order(p->port, 42, item, 202);
    expect_order(p->port, 43, item, 202);
    expect_order(p->port, 44, item, 410);
}

/* The stack's Redis a replica of a primary that is not there: what a
 * single-host Redis demoted behind the daemons' backs does, it takes every
 * connection and answers every write READONLY. */
static void redis_replica_of_nothing(bool on)
{
    redisContext *rc = harness_redis(&harness_conf);
    char port[16];
    snprintf(port, sizeof(port), "%d", harness_free_port());
    freeReplyObject(on ? harness_cmd(rc, "REPLICAOF 127.0.0.1 %s", port) : harness_cmd(rc, "REPLICAOF NO ONE"));
    redisFree(rc);
}

/* Whatever happened in the test, the stack's Redis is a primary again. */
static int redis_primary_again(void **state)
{
    (void)state;
    redisContext *rc;
    char err[256];
    if (harness_redis_open(&harness_conf, &rc, err, sizeof(err)) != 0)
        return -1;
    redisReply *r = redisCommand(rc, "REPLICAOF NO ONE");
    int ok = r && r->type == REDIS_REPLY_STATUS;
    freeReplyObject(r);
    redisFree(rc);
    return ok ? 0 : -1;
}

/* A stuck Redis does not grow the log with the attempts: while it answers
 * every order's write READONLY (the producer reconnects each time, and
 * each connect succeeds), the log says so once and counts; once Redis is a
 * primary again it says the failure is over, with the count. */
static void test_readonly_redis_logs_once(void **state)
{
    (void)state;
    enum { ATTEMPTS = 60, MAX_LINES = 12 };
    struct prod *p = &main_prod;
    int64_t item = new_item(1000), u = 300, errors0;
    int lines0, refused = 0;
    bool ok;
    expect_order(p->port, u++, item, 202);
    lines0 = harness_file_lines(p->log, "");
    errors0 = sale_metric(p->mport, "seckill_producer_redis_errors_total");
    redis_replica_of_nothing(true);
    /* Every order refused, none kept, until the producer has failed on
     * Redis ATTEMPTS times. */
    WAIT_UNTIL((expect_order(p->port, u++, item, 503), ++refused,
                sale_metric(p->mport, "seckill_producer_redis_errors_total") >= errors0 + ATTEMPTS),
               30000, ok);
    assert_true(ok);
    int grown = harness_file_lines(p->log, "") - lines0;
    if (grown > MAX_LINES)
        fail_msg("%d log lines for %d failed attempts (at most %d allowed); see %s", grown, ATTEMPTS, MAX_LINES,
                 p->log);
    assert_true(harness_file_lines(p->log, "right after connecting; orders are refused (503)") == 1);

    /* Healed: orders are taken, and the log says the failure is over, with
     * its count: every refused order after the first two (the first broke
     * the connection the producer had, the next one the first new one). */
    redis_replica_of_nothing(false);
    WAIT_UNTIL(harness_order(p->port, u++, item, NULL, 0) == 202 &&
                   harness_over_count(p->log, "right after connecting: over (a command worked; taken again)") >= 0,
               15000, ok);
    if (!ok)
        fail_msg("no order taken, or no end of the failure logged, after Redis healed; see %s", p->log);
    long long times = harness_over_count(p->log, "right after connecting: over (a command worked; taken again)");
    if (times < refused - 2)
        fail_msg("the failure is over after %lld times, but %d orders were refused; see %s", times, refused, p->log);
}

/* Whatever happened in the test, the broker is running again after it. */
static int restart_stack(void **state)
{
    char cmd[1024];
    (void)state;
    snprintf(cmd, sizeof(cmd), "'%s/scripts/stack' up >/dev/null", harness_root());
    return system(cmd) == 0 ? 0 : -1;
}

/* --- winners remembered ------------------------------------------------ */

/* user's press is answered 409 by the producer alone (counted as local). */
static bool winner_local(const struct prod *p, int64_t user, int64_t item)
{
    int64_t before = sale_metric(p->mport, "seckill_producer_duplicate_local_total");
    return harness_order(p->port, user, item, NULL, 0) == 409 &&
           sale_metric(p->mport, "seckill_producer_duplicate_local_total") > before;
}

/* A winner who presses again costs no Redis round trip: once the producer
 * has checked the item after learning it, the answers come from memory
 * (the producer's own round-trip counter stands still while they do), and
 * another buyer still goes to Redis. */
static void test_winner_answered_locally(void **state)
{
    (void)state;
    struct prod p2 = { 0 };
    char resp[256];
    int64_t item = new_item(5);
    bool ok;
    prod_start(&p2, 20000, true);
    expect_order(p2.port, 51, item, 202);
    WAIT_UNTIL(winner_local(&p2, 51, item), 10000, ok);
    assert_true(ok);
    const char *dup = "seckill_producer_requests_total{outcome=\"duplicate\"}";
    int64_t trips = sale_metric(p2.mport, "seckill_producer_redis_roundtrips_total");
    int64_t local = sale_metric(p2.mport, "seckill_producer_duplicate_local_total"), dups = sale_metric(p2.mport, dup);
    for (int i = 0; i < 10; i++) {
        assert_int_equal(harness_order(p2.port, 51, item, resp, sizeof(resp)), 409);
        assert_non_null(strstr(resp, "\"status\":\"duplicate\""));
    }
    assert_int_equal(sale_metric(p2.mport, "seckill_producer_redis_roundtrips_total"), trips);
    assert_int_equal(sale_metric(p2.mport, "seckill_producer_duplicate_local_total"), local + 10);
    assert_int_equal(sale_metric(p2.mport, dup), dups + 10);
    /* someone else is not a winner: Redis decides */
    expect_order(p2.port, 52, item, 202);
    assert_true(sale_metric(p2.mport, "seckill_producer_redis_roundtrips_total") > trips);
    assert_int_equal(item_key_int(item, KEYS_ITEM_STOCK, "GET"), 3);
    prod_stop(&p2);
}

/* The 202s have a histogram of their own, beside every request's: a
 * duplicate and a sold-out answer count in the second only. */
static void test_accepted_histogram(void **state)
{
    (void)state;
    struct prod p2 = { 0 };
    const char *acc = "seckill_producer_accepted_duration_seconds_count";
    const char *acc_inf = "seckill_producer_accepted_duration_seconds_bucket{le=\"+Inf\"}";
    const char *all = "seckill_producer_request_duration_seconds_count";
    int64_t item = new_item(1);
    prod_start(&p2, 20000, true);
    int64_t acc0 = sale_metric(p2.mport, acc), all0 = sale_metric(p2.mport, all);
    expect_order(p2.port, 71, item, 202);
    expect_order(p2.port, 71, item, 409);
    expect_order(p2.port, 72, item, 410);
    assert_int_equal(sale_metric(p2.mport, acc), acc0 + 1);
    assert_int_equal(sale_metric(p2.mport, acc_inf), acc0 + 1);
    assert_int_equal(sale_metric(p2.mport, all), all0 + 3);
    prod_stop(&p2);
}

/* A winner whose unit was given back - by another producer, which only
 * Redis tells this one - is not told 409 from memory: within a refresh
 * period the press goes to Redis again, and buys; also when the unit was
 * bought again meanwhile and only seckill_restore's given-back count moved. The
 * deadlines are below WIN_RESYNC_MS, after which the memory is dropped
 * anyway. */
static void test_winner_given_back(void **state)
{
    (void)state;
    struct prod p2 = { 0 };
    char resp[256];
    int64_t item = new_item(5), order_id;
    bool ok;
    int st = 0;
    prod_start(&p2, 20000, true);
    assert_int_equal(harness_order(p2.port, 61, item, resp, sizeof(resp)), 202);
    order_id = order_id_of(resp);
    WAIT_UNTIL(winner_local(&p2, 61, item), 5000, ok);
    assert_true(ok);
    int64_t dropped = sale_metric(p2.mport, "seckill_producer_winners_dropped_total");
    give_back_by_hand(item, 61, order_id);
    assert_int_equal(item_key_int(item, KEYS_ITEM_STOCK, "GET"), 5);
    WAIT_UNTIL((st = harness_order(p2.port, 61, item, resp, sizeof(resp))) != 409, 5000, ok);
    if (!ok)
        fail_msg("buyer 61 gave the unit back and is still told 409: %s", resp);
    assert_int_equal(st, 202);
    assert_int_equal(item_key_int(item, KEYS_ITEM_STOCK, "GET"), 4);
    assert_true(sale_metric(p2.mport, "seckill_producer_winners_dropped_total") > dropped);

    /* Given back and taken by someone else between two checks: the buyers
     * are as many as before, only seckill_restore's count moved. In one step,
     * as no check can fall between. */
    WAIT_UNTIL(winner_local(&p2, 61, item), 5000, ok);
    assert_true(ok);
    char k[KEYS_ITEM_PARTS][KEYS_MAX];
    redisContext *rc = harness_redis(&harness_conf);
    keys_item_all(k, harness_conf.redis.key_prefix, item);
    freeReplyObject(harness_cmd(rc, "EVAL %s 2 %s %s",
                                "redis.call('SREM', KEYS[1], '61') redis.call('SADD', KEYS[1], '62') "
                                "redis.call('HINCRBY', KEYS[2], 'given_back', 1) return 1",
                                k[KEYS_ITEM_BUYERS], k[KEYS_ITEM_ORDERS]));
    redisFree(rc);
    WAIT_UNTIL((st = harness_order(p2.port, 61, item, resp, sizeof(resp))) != 409, 5000, ok);
    if (!ok)
        fail_msg("buyer 61's unit went to 62 and 61 is still told 409: %s", resp);
    assert_int_equal(st, 202);
    expect_order(p2.port, 62, item, 409);
    prod_stop(&p2);
}

/* An item both sold out here and with a winner remembered is checked in
 * Redis once a pass, not once for each view: in a sale of many items these
 * checks are most of Redis's calls (issue #31). A new producer, so that its
 * tables hold this item alone: one buyer takes the only unit (a winner),
 * the next hears 410 (sold out); once both are answered from memory, the
 * passes and the checks advance together (read one after the other, so
 * one pass apart at most). */
static void test_one_check_per_item(void **state)
{
    (void)state;
    struct prod p2 = { 0 };
    int64_t item = new_item(1);
    const char *passes = "seckill_producer_item_check_passes_total", *checks = "seckill_producer_item_checks_total";
    bool ok;
    prod_start(&p2, 20000, true);
    expect_order(p2.port, 71, item, 202);
    expect_order(p2.port, 72, item, 410);
    WAIT_UNTIL(winner_local(&p2, 71, item) && answered_locally(&p2, 73, item), 10000, ok);
    assert_true(ok);
    int64_t p0 = sale_metric(p2.mport, passes), c0 = sale_metric(p2.mport, checks);
    WAIT_UNTIL(sale_metric(p2.mport, passes) >= p0 + 10, 10000, ok);
    assert_true(ok);
    int64_t dp = sale_metric(p2.mport, passes) - p0, dc = sale_metric(p2.mport, checks) - c0;
    if (dc < dp - 1 || dc > dp + 1)
        fail_msg("%lld checks in %lld passes over one item", (long long)dc, (long long)dp);
    prod_stop(&p2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sale_arithmetic),
        cmocka_unit_test(test_one_user_hammering),
        cmocka_unit_test(test_http_edge),
        cmocka_unit_test(test_slow_client_cannot_stall),
        cmocka_unit_test(test_sold_out_locally),
        cmocka_unit_test(test_sold_out_unit_back),
        cmocka_unit_test(test_sold_out_given_back_between_checks),
        cmocka_unit_test(test_stock_added_after_sold_out),
        cmocka_unit_test(test_paused),
        cmocka_unit_test(test_stock_changes_racing_buys),
        cmocka_unit_test(test_winner_answered_locally),
        cmocka_unit_test(test_accepted_histogram),
        cmocka_unit_test(test_winner_given_back),
        cmocka_unit_test(test_one_check_per_item),
        cmocka_unit_test(test_order_key_reload),
        cmocka_unit_test_teardown(test_readonly_redis_logs_once, redis_primary_again),
        cmocka_unit_test_teardown(test_kafka_down_and_orphans, restart_stack),
    };
    return cmocka_run_group_tests_name("producer", tests, setup, teardown);
}
