/* seckill-producer against the real stack: the sale's arithmetic, one unit
 * per user under concurrency, the HTTP edge, load shedding, a slow client,
 * Kafka down (units given back), and an orphaned reservation after SIGKILL
 * re-published by the sweeper. */
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

#include "keys.h"
#include "order.h"

#define PARTS_MAX 64

/* A running producer: its config file, port, log and pid. */
struct prod {
    struct cfg c;
    char cfgpath[128];
    char log[128];
    int port;
    pid_t pid;
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
    p->port = harness_free_port();
    p->c.producer.port = p->port;
    p->c.producer.max_inflight = max_inflight;
    p->c.producer.connection_timeout_s = 1;
    p->c.producer.sweep_age_ms = 1000; /* raised to 2 x message.timeout.ms + 2 s by the producer */
    p->c.producer.sweep_interval_ms = 200;
    p->c.producer.drain_timeout_ms = 10000;
    /* A buyer waits at most this long for Kafka; keeps the outage test short. */
    harness_props_set(&p->c.kafka.producer_properties, "message.timeout.ms", "2000");
    harness_cfg_file(&p->c, p->cfgpath, sizeof(p->cfgpath));
    snprintf(p->log, sizeof(p->log), "/tmp/seckill-test-producer-%d.log", p->port);
    harness_bin("seckill-producer", bin, sizeof(bin));
    char *argv[] = { bin, "-c", p->cfgpath, NULL };
    p->pid = harness_spawn(argv, p->log);
    if (want_healthy)
        WAIT_UNTIL(healthz(p->port) == 200, 30000, ok);
    else
        WAIT_UNTIL(healthz(p->port) > 0, 30000, ok);
    if (!ok)
        fail_msg("producer on port %d did not come up; see %s", p->port, p->log);
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
    char bin[512], id[24], st[24];
    int64_t item = 900000000 + (int64_t)util_rand_below(99999999);
    harness_bin("seckillctl", bin, sizeof(bin));
    snprintf(id, sizeof(id), "%lld", (long long)item);
    snprintf(st, sizeof(st), "%lld", (long long)stock);
    char *argv[] = { bin, "-c", main_prod.cfgpath, "item", "create", "--id", id, "--stock", st, NULL };
    assert_int_equal(harness_wait_exit(harness_spawn(argv, "/dev/null"), 30000), 0);
    return item;
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

static int order(int port, int64_t user, int64_t item, char *resp, size_t len)
{
    char body[128];
    snprintf(body, sizeof(body), "{\"user_id\":%lld,\"item_id\":%lld}", (long long)user, (long long)item);
    return harness_http(port, "POST", "/api/v1/seckill", "application/json", body, resp, len);
}

/* --- reading the topic back ------------------------------------------- */

struct topic_mark {
    int n;
    int64_t high[PARTS_MAX];
};

static rd_kafka_t *topic_consumer(void)
{
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    assert_int_equal(rd_kafka_conf_set(conf, "bootstrap.servers", harness_conf.kafka.brokers, err, sizeof(err)), RD_KAFKA_CONF_OK);
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

/* Read every message after the mark up to the current end; collect the
 * order ids of item's orders into ids (up to max). Returns how many. */
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

static void *fire(void *arg)
{
    struct shot *s = arg;
    char resp[256];
    s->status = order(s->port, s->user, s->item, resp, sizeof(resp));
    const char *id = strstr(resp, "\"order_id\":\"");
    s->order_id = id ? strtoll(id + 12, NULL, 10) : 0;
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
    assert_int_equal(order(main_prod.port, 999999, item, NULL, 0), 410);
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
    assert_int_equal(order(port, 5, 1, resp, sizeof(resp)), 404);
    assert_non_null(strstr(resp, "unknown_item"));
    assert_int_equal(order(port, 5, item, resp, sizeof(resp)), 202);
    assert_non_null(strstr(resp, "\"status\":\"accepted\""));

    /* /metrics parses as Prometheus text and counts what we saw. */
    static char m[65536];
    assert_int_equal(harness_http(port, "GET", "/metrics", NULL, NULL, m, sizeof(m)), 200);
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

/* Kafka stopped: an order that never reached it is refused and its unit
 * given back; beyond max_inflight the producer sheds with 429; a reservation
 * orphaned by SIGKILL is re-published by the next producer's sweeper. */
static void test_kafka_down_and_orphans(void **state)
{
    (void)state;
    struct prod b = { 0 }, c2 = { 0 };
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

    /* 1. Not persisted: 503, and the unit is back. */
    s1 = (struct shot){ b.port, 111, item, 0, 0 };
    assert_int_equal(pthread_create(&th, NULL, fire, &s1), 0);
    WAIT_UNTIL(item_key_int(item, KEYS_ITEM_STOCK, "GET") == 4, 5000, ok);
    assert_true(ok);
    /* 2. The one request in flight fills max_inflight = 1: shed. */
    assert_int_equal(order(b.port, 222, item, NULL, 0), 429);
    pthread_join(th, NULL);
    assert_int_equal(s1.status, 503);
    assert_int_equal(item_key_int(item, KEYS_ITEM_STOCK, "GET"), 5);
    assert_int_equal(item_key_int(item, KEYS_ITEM_BUYERS, "SCARD"), 0);
    assert_int_equal(item_key_int(item, KEYS_ITEM_PENDING, "HLEN"), 0);
    assert_int_equal(item_key_int(item, KEYS_ITEM_UNPUB, "ZCARD"), 0);

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
    assert_int_equal(item_key_int(item, KEYS_ITEM_STOCK, "GET"), 4);
    assert_int_equal(item_key_int(item, KEYS_ITEM_UNPUB, "ZCARD"), 1);

    snprintf(cmd, sizeof(cmd), "'%s/scripts/stack' up >/dev/null", harness_root());
    assert_int_equal(system(cmd), 0);
    /* A new producer's sweeper finds the orphan and publishes it. */
    prod_start(&c2, 100, true);
    WAIT_UNTIL(item_key_int(item, KEYS_ITEM_UNPUB, "ZCARD") == 0, 30000, ok);
    assert_true(ok);
    assert_int_equal(topic_orders(&mark, item, ids, 8), 1);
    /* Still reserved (the consumer clears it once persisted), never given back. */
    assert_int_equal(item_key_int(item, KEYS_ITEM_PENDING, "HLEN"), 1);
    assert_int_equal(item_key_int(item, KEYS_ITEM_STOCK, "GET"), 4);
    prod_stop(&c2);
}

/* Whatever happened in the test, the broker is running again after it. */
static int restart_stack(void **state)
{
    char cmd[1024];
    (void)state;
    snprintf(cmd, sizeof(cmd), "'%s/scripts/stack' up >/dev/null", harness_root());
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sale_arithmetic),
        cmocka_unit_test(test_one_user_hammering),
        cmocka_unit_test(test_http_edge),
        cmocka_unit_test(test_slow_client_cannot_stall),
        cmocka_unit_test_teardown(test_kafka_down_and_orphans, restart_stack),
    };
    return cmocka_run_group_tests_name("producer", tests, setup, teardown);
}
