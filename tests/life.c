#include "life.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "funclibs.h"
#include "harness.h"
#include "paymsg.h"
#include "paysig.h"
#include "rfunc.h"
#include "sale.h"

static char user[64], password[40];
/* The items this run made, dropped by the group's teardown too: a test that
 * fails leaves before its own cleanup. */
static int64_t made[8];
static int nmade;

/* --- fixtures ------------------------------------------------------------------ */

int life_load_return(void)
{
    char err[512];
    int was = -1;
    redisContext *rc = harness_redis(&harness_conf);
    enum rfunc_status st = rfunc_load(rc, &funclib_return, &was, err, sizeof(err));
    redisFree(rc);
    if (st != RFUNC_OK && st != RFUNC_NEWER) {
        fprintf(stderr, "# loading seckill_return: %s\n", err);
        return -1;
    }
    return 0;
}

int life_setup(void **state, const char *name)
{
    harness_setup(state);
    if (life_load_return() != 0)
        return -1;
    sale_consumer_acl_user(name, user, sizeof(user), password, sizeof(password));
    return 0;
}

int life_teardown(void **state)
{
    redisContext *rc = NULL;
    char err[256];
    if (harness_redis_open(&harness_conf, &rc, err, sizeof(err)) == 0) {
        redisReply *r = redisCommand(rc, "ACL DELUSER %s", user);
        freeReplyObject(r);
        redisFree(rc);
    }
    for (int i = 0; i < nmade; i++)
        life_pg_drop(made[i]);
    return harness_teardown(state);
}

const char *life_user(void)
{
    return user;
}

int64_t life_item_id(int64_t base)
{
    int64_t item = base + (int64_t)util_rand_below(9999999);
    if (nmade < (int)ARRAY_SIZE(made))
        made[nmade++] = item;
    return item;
}

/* --- what the stores hold --------------------------------------------------------- */

int64_t life_pg_int2(const char *sql, int64_t a1, int64_t a2)
{
    char s1[24], s2[24];
    snprintf(s1, sizeof(s1), "%" PRId64, a1);
    snprintf(s2, sizeof(s2), "%" PRId64, a2);
    const char *p[] = { s1, s2 };
    PGconn *pg = harness_pg(&harness_conf);
    PGresult *r = PQexecParams(pg, sql, strstr(sql, "$2") ? 2 : 1, NULL, p, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        fail_msg("%s: %s", sql, PQerrorMessage(pg));
    int64_t v = PQntuples(r) == 0 || PQgetisnull(r, 0, 0) ? -1 : strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    PQfinish(pg);
    return v;
}

int64_t life_pg_int(const char *sql, int64_t a1)
{
    return life_pg_int2(sql, a1, 0);
}

void life_pg_drop(int64_t item)
{
    harness_pg_try(
        &harness_conf,
        "DELETE FROM late_payments WHERE order_id IN (SELECT order_id FROM orders WHERE item_id = $1)", item,
        0);
    harness_pg_try(&harness_conf, "DELETE FROM order_returns WHERE item_id = $1", item, 0);
    harness_pg_try(&harness_conf,
                   "DELETE FROM order_deadlines WHERE order_id IN (SELECT order_id FROM orders WHERE item_id = $1)",
                   item, 0);
    harness_pg_try(&harness_conf, "DELETE FROM orders WHERE item_id = $1", item, 0);
    harness_pg_try(&harness_conf, "DELETE FROM order_rejections WHERE item_id = $1", item, 0);
    harness_pg_try(&harness_conf, "DELETE FROM items WHERE item_id = $1", item, 0);
}

int64_t life_orders_in(int64_t item, const char *status)
{
    char sql[160];
    /* status is one of the test's own words, never input */
    snprintf(sql, sizeof(sql), "SELECT count(*) FROM orders WHERE item_id = $1 AND status = '%s'", status);
    return life_pg_int(sql, item);
}

int64_t life_stock_left(int64_t item)
{
    return life_pg_int("SELECT stock_left FROM items WHERE item_id = $1", item);
}

int64_t life_returns_done(int64_t item)
{
    return life_pg_int("SELECT count(*) FROM order_returns WHERE item_id = $1 AND done_at IS NOT NULL", item);
}

void life_orders_by_pay_by(int64_t item, int n, int64_t *ids, int64_t *users, int64_t *pay_by)
{
    char sitem[24];
    snprintf(sitem, sizeof(sitem), "%" PRId64, item);
    const char *p[] = { sitem };
    PGconn *pg = harness_pg(&harness_conf);
    PGresult *r = PQexecParams(
        pg,
        "SELECT order_id, user_id, (extract(epoch FROM pay_by) * 1000)::bigint FROM orders "
        "WHERE item_id = $1 ORDER BY pay_by, order_id",
        1, NULL, p, NULL, NULL, 0);
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(r), n);
    for (int i = 0; i < n; i++) {
        ids[i] = strtoll(PQgetvalue(r, i, 0), NULL, 10);
        users[i] = strtoll(PQgetvalue(r, i, 1), NULL, 10);
        pay_by[i] = strtoll(PQgetvalue(r, i, 2), NULL, 10);
    }
    PQclear(r);
    PQfinish(pg);
}

long long life_redis_of(int64_t item, enum keys_item_part part)
{
    return life_redis_at(item, BUCKET_HOME, part);
}

long long life_redis_at(int64_t item, int salt, enum keys_item_part part)
{
    char k[KEYS_MAX];
    assert_true(keys_item_at(k, sizeof(k), harness_conf.redis.key_prefix, item, salt, part) > 0);
    redisContext *rc = harness_redis(&harness_conf);
    long long v = part == KEYS_ITEM_STOCK    ? harness_int(rc, "GET %s", k)
                  : part == KEYS_ITEM_ORDERS ? harness_int(rc, "HGET %s given_back", k)
                                             : harness_int(rc, "SCARD %s", k);
    redisFree(rc);
    return v;
}

/* --- a producer and consumers ---------------------------------------------------- */

void life_start_consumer(struct life *l, int i)
{
    char bin[512];
    harness_bin("seckill-consumer", bin, sizeof(bin));
    char *argv[] = { bin, "-c", l->cfgpath[i], NULL };
    l->cons[i] = harness_spawn(argv, l->clog[i]);
}

void life_wait_assigned(struct life *l, int i)
{
    bool ok;
    WAIT_UNTIL(sale_metric(l->cport[i], "seckill_consumer_assigned_partitions") > 0, 60000, ok);
    if (!ok)
        fail_msg("consumer %d did not come up; see %s", i, l->clog[i]);
}

void life_stop_consumer(struct life *l, int i)
{
    if (l->cons[i] <= 0)
        return;
    assert_int_equal(kill(l->cons[i], SIGTERM), 0);
    int st = harness_wait_exit(l->cons[i], 30000);
    l->cons[i] = 0;
    if (st != 0)
        fail_msg("consumer %d exited %d; see %s", i, st, l->clog[i]);
}

int64_t life_cons_metric(const struct life *l, const char *name)
{
    int64_t sum = 0;
    for (int i = 0; i < l->ncons; i++)
        if (l->cons[i] > 0)
            sum += sale_metric(l->cport[i], name);
    return sum;
}

/* An item of stock units, its buyers given pay_s seconds to pay. */
static void item_create(struct life *l, const struct life_opts *o, int64_t stock, int pay_s)
{
    char sid[24], sstock[24], spay[24], sk[16], *out = NULL;
    l->item = life_item_id(o->item_base);
    snprintf(sid, sizeof(sid), "%" PRId64, l->item);
    snprintf(sstock, sizeof(sstock), "%" PRId64, stock);
    snprintf(spay, sizeof(spay), "%d", pay_s);
    snprintf(sk, sizeof(sk), "%d", o->buckets > 1 ? o->buckets : 1);
    const char *args[] = { "-c",   l->cfgpath[0], "item",         "create", "--id",      sid, "--stock",
                           sstock, "--pay-within", spay,          "--buckets", sk,       NULL };
    int st = harness_run(&out, "seckillctl", args, 30000);
    if (st != 0 || !strstr(out, "to be paid within"))
        fail_msg("seckillctl item create --pay-within %d: exit %d: %s", pay_s, st, out);
    free(out);
}

/* The run's configuration (as the ACL user, on topics and a group named
 * after o->name and rnd), one file per consumer. */
static void life_cfg(struct life *l, const struct life_opts *o, const char *rnd)
{
    int pid = (int)getpid();
    snprintf(l->pwfile, sizeof(l->pwfile), "/tmp/sktest-%s-pw-%d-%s", o->name, pid, rnd);
    harness_write_secret(l->pwfile, password);
    harness_cfg(&l->c);
    harness_set_str(&l->c.redis.key_prefix, harness_conf.redis.key_prefix);
    harness_set_str(&l->c.redis.user[CFG_ROLE_CONSUMER], user);
    harness_set_str(&l->c.redis.password_file[CFG_ROLE_CONSUMER], l->pwfile);
    free(l->c.kafka.topic);
    assert_true(asprintf(&l->c.kafka.topic, "sktest.%s.%d.%s", o->name, pid, rnd) > 0);
    free(l->c.kafka.dlq_topic);
    assert_true(asprintf(&l->c.kafka.dlq_topic, "%s.dlq", l->c.kafka.topic) > 0);
    if (o->payments) {
        /* Payments on a topic of this run's own: none of another run's. */
        free(l->c.kafka.payments_topic);
        assert_true(asprintf(&l->c.kafka.payments_topic, "sktest.payments.%s.%d.%s", o->name, pid, rnd) > 0);
    }
    free(l->c.consumer.group_id);
    assert_true(asprintf(&l->c.consumer.group_id, "sktest-%s-%d-%s", o->name, pid, rnd) > 0);
    l->c.consumer.workers = 2;
    l->c.consumer.expire_interval_ms = 100;
    l->c.consumer.return_backoff_cap_ms = 300;
    harness_producer_ports(&l->c);
    l->port = l->c.producer.port;
    for (int i = 0; i < l->ncons; i++) {
        l->c.consumer.metrics_port = l->cport[i] = harness_free_port();
        char path[sizeof(l->cfgpath[i])]; /* a copy: GCC's -Wrestrict sees one object in l */
        harness_cfg_file(&l->c, path, sizeof(path));
        memcpy(l->cfgpath[i], path, sizeof(path));
        snprintf(l->clog[i], sizeof(l->clog[i]), "%s.consumer.log", path);
    }
}

void life_start(struct life *l, const struct life_opts *o, int ncons, int64_t stock, int pay_s)
{
    char bin[512], rnd[9];
    bool ok;
    memset(l, 0, sizeof(*l));
    l->ncons = ncons;
    l->payments = o->payments;
    l->user_base = o->user_base + (int64_t)util_rand_below(1000000) * o->user_span;
    assert_int_equal(util_random_hex(rnd, 4), 0);
    life_cfg(l, o, rnd);
    assert_int_equal(harness_topic_create(&l->c, l->c.kafka.topic, 4), 0);
    assert_int_equal(harness_topic_create(&l->c, l->c.kafka.dlq_topic, 1), 0);
    if (o->payments)
        assert_int_equal(harness_topic_create(&l->c, l->c.kafka.payments_topic, 4), 0);
    item_create(l, o, stock, pay_s);
    if (o->payments) {
        l->kp = life_producer(&l->c, "admin", "0");
        l->pay = life_producer(&l->c, "payment", "0");
    }
    snprintf(l->plog, sizeof(l->plog), "%s.producer.log", l->cfgpath[0]);
    harness_bin("seckill-producer", bin, sizeof(bin));
    char *pargv[] = { bin, "-c", l->cfgpath[0], NULL };
    l->prod = harness_spawn(pargv, l->plog);
    for (int i = 0; i < l->ncons; i++)
        life_start_consumer(l, i);
    WAIT_UNTIL(harness_http(l->port, "GET", "/healthz", NULL, NULL, NULL, 0) == 200, 60000, ok);
    if (!ok)
        fail_msg("the producer did not come up; see %s", l->plog);
    for (int i = 0; i < l->ncons; i++)
        life_wait_assigned(l, i);
}

void life_stop(struct life *l)
{
    if (l->prod > 0) {
        kill(l->prod, SIGTERM);
        assert_int_equal(harness_wait_exit(l->prod, 30000), 0);
    }
    for (int i = 0; i < l->ncons; i++)
        life_stop_consumer(l, i);
    if (l->payments) {
        rd_kafka_flush(l->kp, 10000);
        rd_kafka_destroy(l->kp);
        rd_kafka_flush(l->pay, 10000);
        rd_kafka_destroy(l->pay);
        harness_topic_delete(&l->c, l->c.kafka.payments_topic);
    }
    harness_topic_delete(&l->c, l->c.kafka.topic);
    harness_topic_delete(&l->c, l->c.kafka.dlq_topic);
    life_pg_drop(l->item);
    unlink(l->pwfile);
    for (int i = 0; i < l->ncons && !getenv("SECKILL_TEST_KEEP_LOGS"); i++) {
        unlink(l->cfgpath[i]);
        unlink(l->clog[i]);
    }
    if (!getenv("SECKILL_TEST_KEEP_LOGS"))
        unlink(l->plog);
    cfg_free(&l->c);
}

/* --- publishing ---------------------------------------------------------------- */

rd_kafka_t *life_producer(const struct cfg *c, const char *kuser, const char *linger_ms)
{
    char err[512];
    rd_kafka_conf_t *conf = harness_kafka_conf(c, kuser);
    assert_int_equal(rd_kafka_conf_set(conf, "enable.idempotence", "true", err, sizeof(err)),
                     RD_KAFKA_CONF_OK);
    assert_int_equal(rd_kafka_conf_set(conf, "linger.ms", linger_ms, err, sizeof(err)), RD_KAFKA_CONF_OK);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (!rk)
        fail_msg("rd_kafka_new as %s: %s", kuser, err);
    return rk;
}

void life_produce(rd_kafka_t *rk, const char *topic, const char *key, const void *val, size_t len)
{
    rd_kafka_resp_err_t e;
    do {
        e = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, key ? strlen(key) : 0),
                              RD_KAFKA_V_VALUE((void *)val, len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                              RD_KAFKA_V_END);
        if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL)
            rd_kafka_poll(rk, 10);
    } while (e == RD_KAFKA_RESP_ERR__QUEUE_FULL);
    assert_int_equal(e, RD_KAFKA_RESP_ERR_NO_ERROR);
}

void life_payment(rd_kafka_t *rk, const char *topic, int64_t order, int64_t u, int64_t paid_at_ms,
                  const char *ref)
{
    char buf[PAY_MSG_MAX], key[24];
    struct pay_msg m = { .order_id = order, .user_id = u, .paid_at_ms = paid_at_ms };
    snprintf(m.ref, sizeof(m.ref), "%s", ref);
    assert_int_equal(psig_sign(&m), 0);
    int n = paymsg_encode(&m, buf, sizeof(buf));
    assert_true(n > 0);
    snprintf(key, sizeof(key), "%" PRId64, u);
    life_produce(rk, topic, key, buf, (size_t)n);
}

/* --- raw HTTP ------------------------------------------------------------------- */

int life_http_on(int fd, const char *req, size_t len, struct life_resp *r)
{
    char buf[16384];
    size_t got = 0, total = 0;
    memset(r, 0, sizeof(*r));
    r->status = -1;
    if (fd < 0)
        return -1;
    for (size_t off = 0; off < len;) {
        ssize_t w = send(fd, req + off, len - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            goto out;
        off += (size_t)w;
    }
    for (;;) {
        char tmp[4096];
        ssize_t n = read(fd, tmp, sizeof(tmp));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        size_t keep = (size_t)n < sizeof(buf) - 1 - got ? (size_t)n : sizeof(buf) - 1 - got;
        memcpy(buf + got, tmp, keep);
        got += keep;
        total += (size_t)n;
    }
    buf[got] = 0;
    char *end = strstr(buf, "\r\n\r\n");
    if (!end || sscanf(buf, "HTTP/1.%*d %d", &r->status) != 1) {
        r->status = -1;
        goto out;
    }
    snprintf(r->head, sizeof(r->head), "%.*s", (int)(end - buf), buf);
    r->body_len = total - (size_t)(end + 4 - buf);
    snprintf(r->body, sizeof(r->body), "%s", end + 4);
out:
    close(fd);
    return r->status;
}

int life_http_raw(int port, const char *req, size_t len, struct life_resp *r)
{
    return life_http_on(harness_connect(port), req, len, r);
}

bool life_resp_header(const struct life_resp *r, const char *name, char *out, size_t len)
{
    size_t nl = strlen(name);
    for (const char *line = strstr(r->head, "\r\n"); line; line = strstr(line + 2, "\r\n")) {
        const char *h = line + 2;
        if (strncasecmp(h, name, nl) == 0 && h[nl] == ':') {
            const char *v = h + nl + 1, *e = strstr(v, "\r\n");
            while (*v == ' ')
                v++;
            snprintf(out, len, "%.*s", (int)(e ? e - v : (long)strlen(v)), v);
            return true;
        }
    }
    return false;
}

bool life_json_str(const char *body, const char *name, char *out, size_t len)
{
    char needle[64];
    snprintf(needle, sizeof(needle), "\"%s\":\"", name);
    const char *p = strstr(body, needle);
    if (!p)
        return false;
    p += strlen(needle);
    const char *q = strchr(p, '"');
    if (!q)
        return false;
    snprintf(out, len, "%.*s", (int)(q - p), p);
    return true;
}
