#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmetrics.h"
#include "kconf.h"
#include "log.h"
#include "secret.h"

/* The smallest valid file; each broken case adds one defect to it. */
#define MINIMAL "kafka = { brokers = \"127.0.0.1:19092\"; };\npostgres = { dbname = \"d\"; admin_user = \"u\"; };\n"

static char path[64];

static int setup(void **state)
{
    (void)state;
    snprintf(path, sizeof(path), "/tmp/sktest-cfg-%d.cfg", (int)getpid());
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(path);
    return 0;
}

static void write_cfg(const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Load text; expect failure with an error that contains want. */
static void expect_error(const char *text, const char *want)
{
    struct cfg c;
    char err[1024] = "";
    write_cfg(text);
    assert_int_equal(cfg_load(path, &c, err, sizeof(err)), -1);
    if (strstr(err, want) == NULL)
        fail_msg("error '%s' does not contain '%s'", err, want);
}

static void test_dev_config_loads(void **state)
{
    (void)state;
    struct cfg c;
    char err[1024], p[512];
    snprintf(p, sizeof(p), "%s/config/seckill.cfg", harness_root());
    assert_int_equal(cfg_load(p, &c, err, sizeof(err)), 0);
    assert_int_equal(c.redis.port, 16379);
    assert_string_equal(c.postgres.port, "15432");
    assert_string_equal(c.kafka.brokers, "127.0.0.1:19092");
    assert_string_equal(c.kafka.topic, "seckill.orders");
    assert_int_equal(c.kafka.producer_properties.n, 2);
    assert_string_equal(c.kafka.producer_properties.keys[0], "linger.ms");
    assert_string_equal(c.kafka.producer_properties.values[0], "5");
    assert_int_equal(c.logging.level, LOG_LVL_INFO);
    assert_int_equal(c.sale.rebuy_after_cancel, 1);
    cfg_free(&c);
}

/* The HA file names the stack's Sentinels, both PostgreSQL servers and the
 * cluster, and asks for a replica's acknowledgement. */
static void test_ha_config_loads(void **state)
{
    (void)state;
    struct cfg c;
    char err[1024], p[512];
    snprintf(p, sizeof(p), "%s/config/seckill-ha.cfg", harness_root());
    if (cfg_load(p, &c, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    assert_int_equal(c.redis.sentinels.n, 3);
    assert_string_equal(c.redis.master_name, "seckill");
    assert_int_equal(c.redis.min_replicas_ack, 1);
    assert_string_equal(c.postgres.host, "127.0.0.1,127.0.0.1");
    assert_string_equal(c.postgres.port, "15432,15433");
    assert_string_equal(c.postgres.target_session_attrs, "read-write");
    assert_string_equal(c.kafka.brokers, "127.0.0.1:19192,127.0.0.1:19193,127.0.0.1:19194");
    cfg_free(&c);
}

static void test_defaults(void **state)
{
    (void)state;
    struct cfg c;
    char err[1024];
    write_cfg(MINIMAL);
    assert_int_equal(cfg_load(path, &c, err, sizeof(err)), 0);
    assert_int_equal(c.redis.port, 6379);
    assert_string_equal(c.redis.key_prefix, "seckill");
    assert_int_equal(c.lock.ttl_ms, 10000);
    assert_int_equal(c.kafka.properties.n, 0);
    /* Issue #44: a buyer whose order expired may buy again unless said
     * otherwise; expiry runs every second, a batch of 1,000 at most. */
    assert_int_equal(c.sale.rebuy_after_cancel, 1);
    assert_int_equal(c.consumer.expire_interval_ms, 1000);
    assert_int_equal(c.consumer.expire_batch, 1000);
    assert_int_equal(c.consumer.return_backoff_cap_ms, 30000);
    /* Payments (issue #44): their own topic; an order not persisted yet is
     * waited for five minutes. */
    assert_string_equal(c.kafka.payments_topic, "seckill.payments");
    assert_int_equal(c.consumer.payment_wait_ms, 300000);
    assert_int_equal(c.consumer.payment_wait_max, 50000);
    cfg_free(&c);
}

/* The order life's settings (issue #44): a boolean that says no, ranges,
 * and reloadable (a running consumer takes them on SIGHUP). */
static void test_order_life_settings(void **state)
{
    (void)state;
    struct cfg c, n;
    char err[1024];
    write_cfg(MINIMAL
              "sale = { rebuy_after_cancel = false; };\n"
              "consumer = { expire_interval_ms = 250; expire_batch = 10; return_backoff_cap_ms = 1000; };\n");
    if (cfg_load(path, &c, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    assert_int_equal(c.sale.rebuy_after_cancel, 0);
    assert_int_equal(c.consumer.expire_interval_ms, 250);
    assert_int_equal(c.consumer.expire_batch, 10);
    assert_int_equal(c.consumer.return_backoff_cap_ms, 1000);
    write_cfg(MINIMAL);
    assert_int_equal(cfg_load(path, &n, err, sizeof(err)), 0);
    assert_int_equal(cfg_reload_check(&c, &n, err, sizeof(err)), 0);
    cfg_free(&n);
    cfg_free(&c);
    expect_error(MINIMAL "sale = { rebuy_after_cancel = 1; };\n",
                 "'sale.rebuy_after_cancel' must be true or false");
    expect_error(MINIMAL "consumer = { expire_batch = 0; };\n",
                 "'consumer.expire_batch' = 0 is out of range");
    expect_error(MINIMAL "consumer = { expire_interval_ms = 10; };\n", "'consumer.expire_interval_ms' = 10");
    expect_error(MINIMAL "sale = { rebuy = true; };\n", "unknown setting 'sale.rebuy'");
}

/* Payments (issue #44): the topic is a restart's, the wait a reload's; the
 * topic must be neither the orders' nor the dead letters'. */
static void test_payment_settings(void **state)
{
    (void)state;
    struct cfg c, n;
    char err[1024];
    write_cfg(MINIMAL "consumer = { payment_wait_ms = 5000; };\n");
    if (cfg_load(path, &c, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    assert_int_equal(c.consumer.payment_wait_ms, 5000);
    write_cfg(MINIMAL "consumer = { payment_wait_ms = 60000; payment_wait_max = 100; };\n");
    assert_int_equal(cfg_load(path, &n, err, sizeof(err)), 0);
    assert_int_equal(n.consumer.payment_wait_max, 100);
    assert_int_equal(cfg_reload_check(&c, &n, err, sizeof(err)), 0); /* both reloadable */
    cfg_free(&n);
    write_cfg("kafka = { brokers = \"127.0.0.1:19092\"; payments_topic = \"shop.payments\"; };\n"
              "postgres = { dbname = \"d\"; admin_user = \"u\"; };\n");
    assert_int_equal(cfg_load(path, &n, err, sizeof(err)), 0);
    assert_string_equal(n.kafka.payments_topic, "shop.payments");
    assert_int_equal(cfg_reload_check(&c, &n, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "kafka.payments_topic"));
    cfg_free(&n);
    cfg_free(&c);
    expect_error(MINIMAL "consumer = { payment_wait_ms = 999; };\n",
                 "'consumer.payment_wait_ms' = 999 is out of range");
    expect_error(MINIMAL "consumer = { payment_wait_max = 99; };\n",
                 "'consumer.payment_wait_max' = 99 is out of range");
    expect_error("kafka = { brokers = \"127.0.0.1:19092\"; payments_topic = \"seckill.orders\"; };\n"
                 "postgres = { dbname = \"d\"; admin_user = \"u\"; };\n",
                 "'kafka.payments_topic' is 'kafka.topic'");
    expect_error("kafka = { brokers = \"127.0.0.1:19092\"; payments_topic = \"seckill.orders.dlq\"; };\n"
                 "postgres = { dbname = \"d\"; admin_user = \"u\"; };\n",
                 "'kafka.payments_topic' is 'kafka.dlq_topic'");
}

static void test_errors_point_at_file_and_line(void **state)
{
    (void)state;
    char want[128];
    snprintf(want, sizeof(want), "%s:3: ", path);
    expect_error(MINIMAL "redis = { port = ; };\n", want);                                 /* syntax */
    expect_error(MINIMAL "redis = { port = 70000; };\n", want);                            /* range */
    expect_error(MINIMAL "redis = { port = 70000; };\n", "'redis.port' = 70000 is out of range [1, 65535]");
    expect_error(MINIMAL "redis = { prot = 1; };\n", "unknown setting 'redis.prot'");
    expect_error(MINIMAL "redis = { prot = 1; };\n", want);
    /* A setting renamed: refused with its new name, where it is. */
    expect_error(MINIMAL "producer = { request_head_timeout_s = 10; };\n",
                 "'producer.request_head_timeout_s' is now 'producer.request_timeout_s'");
    expect_error(MINIMAL "producer = { request_head_timeout_s = 10; };\n", want);
    expect_error(MINIMAL "radis = { port = 1; };\n", "unknown section 'radis'");
    expect_error(MINIMAL "redis = { port = \"x\"; };\n", "'redis.port' must be an integer");
    expect_error(MINIMAL "redis = { host = 5; };\n", "'redis.host' must be a string");
    expect_error(MINIMAL "logging = { level = \"loud\"; };\n", "'logging.level' must be one of");
    expect_error(MINIMAL "logging = { format = \"xml\"; };\n", "'logging.format' must be");
    expect_error(MINIMAL "lock = { backoff_base_ms = 500; backoff_cap_ms = 100; };\n", "must not exceed");
}

/* What start would refuse, loading refuses first (issue 45 §5), so -t says
 * it: libconfig 1.5 wraps an integer literal past 32 bits (4294983675 was
 * taken as 16379), the listeners bind IPv4 only, and a dead-letter topic
 * that is the orders topic would feed the consumer its own dead letters. */
static void test_what_start_refuses(void **state)
{
    (void)state;
    struct cfg c;
    char err[1024] = "";
    expect_error(MINIMAL "redis = { port = 4294983675; };\n", "'redis.port' = 4294983675 is out of range");
    expect_error(MINIMAL "redis = { port = 0x100003FFB; };\n", "'redis.port' = 4294983675 is out of range");
    expect_error(MINIMAL "redis = { port = 2147483648; };\n", "'redis.port' = 2147483648 is out of range");
    expect_error(MINIMAL "redis = { port = 99999999999999999999999; };\n",
                 "'redis.port' = 99999999999999999999999 is out of range [1, 65535]");
    expect_error(MINIMAL "consumer = { batch_size = 4294967297; };\n", "'consumer.batch_size' = 4294967297");
    expect_error("kafka = { brokers = \"127.0.0.1:19092\"; };\n"
                 "postgres = { dbname = \"d\"; admin_user = \"u\"; port = 4294983667; };\n",
                 "'postgres.port' = \"4294983667\": each port must be an integer in [1, 65535]");
    expect_error(MINIMAL "producer = { listen = \"::1\"; };\n", "'producer.listen' = \"::1\" is not an IPv4");
    expect_error(MINIMAL "producer = { listen = \"localhost\"; };\n", "is not an IPv4 address");
    expect_error(MINIMAL "producer = { metrics_listen = \"::\"; };\n", "'producer.metrics_listen'");
    expect_error(MINIMAL "consumer = { metrics_listen = \"example.org\"; };\n", "'consumer.metrics_listen'");
    expect_error("kafka = { brokers = \"127.0.0.1:19092\"; dlq_topic = \"seckill.orders\"; };\n"
                 "postgres = { dbname = \"d\"; admin_user = \"u\"; };\n",
                 "'kafka.dlq_topic' is 'kafka.topic'");
    /* and what is right still loads: a hex literal, the L suffix, 0.0.0.0 */
    write_cfg(MINIMAL "redis = { port = 0x3FFB; };\n"
                      "producer = { listen = \"0.0.0.0\"; };\nconsumer = { batch_size = 64L; };\n");
    assert_int_equal(cfg_load(path, &c, err, sizeof(err)), 0);
    assert_int_equal(c.redis.port, 16379);
    assert_int_equal(c.consumer.batch_size, 64);
    cfg_free(&c);
}

/* Load text; expect it to load, and return redis.port and producer.port. */
static void expect_ports(const char *text, int redis_port, int producer_port)
{
    struct cfg c;
    char err[1024] = "";
    write_cfg(text);
    if (cfg_load(path, &c, err, sizeof(err)) != 0)
        fail_msg("refused: %s\n%s", err, text);
    assert_int_equal(c.redis.port, redis_port);
    assert_int_equal(c.producer.port, producer_port);
    cfg_free(&c);
}

/* The literal is checked however the file lays it out (issue #55): found
 * where libconfig parsed the name, past comments and line ends, never in
 * another setting, a string or a comment; the error names the file and the
 * name's line. */
static void test_wrapped_in_any_layout(void **state)
{
    (void)state;
    char want[160], inc[80], text[512];
    const char *big = "'redis.port' = 4294983675 is out of range [1, 65535]";
    /* the value on the next line */
    snprintf(want, sizeof(want), "%s:4: %s", path, big);
    expect_error(MINIMAL "redis = {\n  port =\n    4294983675;\n};\n", want);
    expect_error(MINIMAL "redis = {\n  port\n  = 4294983675;\n};\n", want);
    /* after another setting on its line, and after one of the same name */
    snprintf(want, sizeof(want), "%s:3: 'consumer.batch_size' = 4294967297", path);
    expect_error(MINIMAL "consumer = { workers = 1; batch_size = 4294967297; };\n", want);
    snprintf(want, sizeof(want), "%s:3: %s", path, big);
    expect_error(MINIMAL "producer = { port = 8080; }; redis = { port = 4294983675; };\n", want);
    /* the name in a string, or in a comment, earlier on the line */
    expect_error(MINIMAL "redis = { host = \"port = 1\"; port = 4294983675; };\n", want);
    expect_error(MINIMAL "redis = { /* port = 1; */ port = 4294983675; };\n", want);
    /* comments between the name, the '=' and the value */
    expect_error(MINIMAL "redis = { port /* 1 */ = # 2\n // 3\n /* 4\n */ 4294983675; };\n", want);
    expect_error(MINIMAL "redis = { port : 4294983675; };\n", want);
    /* a file included into a group: its own name and lines */
    snprintf(inc, sizeof(inc), "%s.inc", path);
    FILE *f = fopen(inc, "w");
    assert_non_null(f);
    fputs("# the port\nport =\n  4294983675;\n", f);
    fclose(f);
    snprintf(want, sizeof(want), "%s:2: %s", inc, big);
    snprintf(text, sizeof(text), MINIMAL "redis = {\n  @include \"%s\"\n};\n", inc);
    expect_error(text, want);

    /* and each layout with a value that fits still loads it */
    expect_ports(MINIMAL "redis = {\n  port =\n    16380;\n};\n", 16380, 8080);
    expect_ports(MINIMAL "producer = { port = 8081; }; redis = { port = 0x3FFC; };\n", 16380, 8081);
    expect_ports(MINIMAL "redis = { host = \"port = 1\"; port /* a */ = # b\n 16381; };\n", 16381, 8080);
    f = fopen(inc, "w");
    assert_non_null(f);
    fputs("port =\n  16382L;\n", f);
    fclose(f);
    expect_ports(text, 16382, 8080);
    unlink(inc);
}

static void test_missing_required_is_named(void **state)
{
    (void)state;
    expect_error("postgres = { dbname = \"d\"; admin_user = \"u\"; };\n", "missing required setting 'kafka.brokers'");
    expect_error("kafka = { brokers = \"b\"; };\npostgres = { admin_user = \"u\"; };\n",
                 "missing required setting 'postgres.dbname'");
    expect_error("kafka = { brokers = \"\"; };\npostgres = { dbname = \"d\"; admin_user = \"u\"; };\n",
                 "'kafka.brokers' must not be empty");
}

static void test_kafka_properties_validated(void **state)
{
    (void)state;
    expect_error(MINIMAL "kafka = { brokers = \"b\"; };\n", "");  /* duplicate section is a syntax error */
    expect_error("kafka = { brokers = \"b\";\n properties = [ \"linger.mss=5\" ]; };\npostgres = { dbname = \"d\"; admin_user = \"u\"; };\n",
                 "linger.mss");
    expect_error("kafka = { brokers = \"b\";\n properties = [ \"nonsense\" ]; };\npostgres = { dbname = \"d\"; admin_user = \"u\"; };\n",
                 "must be a \"name=value\" string");
    expect_error("kafka = { brokers = \"b\";\n properties = [ \"acks=maybe\" ]; };\npostgres = { dbname = \"d\"; admin_user = \"u\"; };\n",
                 "acks");
}

#define KAFKA_MIN "kafka = { brokers = \"127.0.0.1:19092\"; };\n"

/* kconf_new turns Nagle off for every client (over TLS a request's records
 * would otherwise wait for the broker's delayed ACK), and a configured
 * property still has the last word. */
static void test_kconf_nagle_off(void **state)
{
    (void)state;
    struct cfg c;
    char err[1024], v[16];
    size_t vlen;
    for (int configured = 0; configured < 2; configured++) {
        write_cfg(configured ? "kafka = { brokers = \"b:1\"; properties = [ \"socket.nagle.disable=false\" ]; };\n"
                               "postgres = { dbname = \"d\"; admin_user = \"u\"; };\n"
                             : "kafka = { brokers = \"b:1\"; };\npostgres = { dbname = \"d\"; admin_user = \"u\"; };\n");
        assert_int_equal(cfg_load(path, &c, err, sizeof(err)), 0);
        rd_kafka_conf_t *conf = kconf_new(&c, &c.kafka.producer_properties, NULL, err, sizeof(err));
        assert_non_null(conf);
        vlen = sizeof(v);
        assert_int_equal(rd_kafka_conf_get(conf, "socket.nagle.disable", v, &vlen), RD_KAFKA_CONF_OK);
        assert_string_equal(v, configured ? "false" : "true");
        rd_kafka_conf_destroy(conf);
        cfg_free(&c);
    }
}
/* What counts as a broker refusing us: SASL and TLS errors, and a failed
 * certificate check that librdkafka reports as a transport error because
 * the socket closed under the handshake; a plain lost connection does not. */
static void test_kconf_refused(void **state)
{
    (void)state;
    const char *verify = "sasl_ssl://127.0.0.1:19092/bootstrap: error:0A000086:SSL routines::certificate verify "
                         "failed (after 5ms in state SSL_HANDSHAKE)";
    assert_true(kconf_refused(RD_KAFKA_RESP_ERR__SSL, verify));
    assert_true(kconf_refused(RD_KAFKA_RESP_ERR__AUTHENTICATION, "SASL authentication error"));
    assert_true(kconf_refused(RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED, NULL));
    assert_true(kconf_refused(RD_KAFKA_RESP_ERR__TRANSPORT, verify));
    assert_false(kconf_refused(RD_KAFKA_RESP_ERR__TRANSPORT, "Connect to ipv4#127.0.0.1:19092 failed: Connection refused"));
    assert_false(kconf_refused(RD_KAFKA_RESP_ERR__TRANSPORT, NULL));
    assert_false(kconf_refused(RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN, "1/1 brokers are down"));
}

#define PG_MIN(extra) "postgres = { dbname = \"d\"; admin_user = \"u\"; " extra " };\n"

/* Sentinels and the multi-host PostgreSQL of the HA stack: what loads, and
 * the cross-setting mistakes that must not. */
static void test_ha_settings(void **state)
{
    (void)state;
    struct cfg c;
    char err[1024];
    write_cfg(KAFKA_MIN PG_MIN("host = \"127.0.0.1,127.0.0.1\"; port = \"15432,15433\";")
              "redis = { sentinels = [ \"127.0.0.1:16390\", \"localhost:16391\" ]; master_name = \"seckill\";\n"
              "  min_replicas_ack = 1; };\n");
    assert_int_equal(cfg_load(path, &c, err, sizeof(err)), 0);
    assert_int_equal(c.redis.sentinels.n, 2);
    assert_string_equal(c.redis.master_name, "seckill");
    assert_int_equal(c.redis.min_replicas_ack, 1);
    assert_string_equal(c.postgres.port, "15432,15433");
    assert_string_equal(c.postgres.target_session_attrs, "read-write");
    cfg_free(&c);
    /* one port for every host is libpq's rule too */
    write_cfg(KAFKA_MIN PG_MIN("host = \"a,b,c\"; port = 5433;"));
    assert_int_equal(cfg_load(path, &c, err, sizeof(err)), 0);
    assert_string_equal(c.postgres.port, "5433");
    cfg_free(&c);

    expect_error(KAFKA_MIN PG_MIN("") "redis = { sentinels = [ \"127.0.0.1:16390\" ]; };\n",
                 "'redis.sentinels' needs 'redis.master_name'");
    expect_error(KAFKA_MIN PG_MIN("") "redis = { sentinels = [ \"127.0.0.1\" ]; master_name = \"m\"; };\n",
                 "entry \"127.0.0.1\" is not \"host:port\"");
    expect_error(KAFKA_MIN PG_MIN("") "redis = { sentinels = [ \"h:99999\" ]; master_name = \"m\"; };\n",
                 "is not \"host:port\"");
    expect_error(KAFKA_MIN PG_MIN("") "redis = { min_replicas_ack = 17; };\n", "out of range [0, 16]");
    expect_error(KAFKA_MIN PG_MIN("host = \"a,b\"; port = \"1,2,3\";"), "names 3 ports for 2 hosts");
    expect_error(KAFKA_MIN PG_MIN("port = \"15432,x\";"), "each port must be an integer in [1, 65535]");
    expect_error(KAFKA_MIN PG_MIN("port = \"15432,\";"), "each port must be an integer");
    expect_error(KAFKA_MIN PG_MIN("port = 0;"), "each port must be an integer");
    expect_error(KAFKA_MIN PG_MIN("port = 1.5;"), "must be a port or a string of ports");
    expect_error(KAFKA_MIN PG_MIN("target_session_attrs = \"rw\";"), "must be one of any, read-write");
}

static void test_unreadable_file(void **state)
{
    (void)state;
    struct cfg c;
    char err[1024];
    assert_int_equal(cfg_load("/nonexistent/seckill.cfg", &c, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "/nonexistent/seckill.cfg: cannot read"));
}

/* A server certificate checked against no CA, or against a CA file that is
 * not there, is a load error at the line of the setting to change; so is a
 * producer that believes any client's user_id beyond loopback (issue #34). */
static void test_trust_rules(void **state)
{
    (void)state;
    char want[160], ca[96];
    struct cfg c;
    char err[1024];
    snprintf(want, sizeof(want), "%s:3: 'postgres.sslmode' = \"verify-full\" checks", path);
    expect_error("kafka = { brokers = \"b\"; };\npostgres = { dbname = \"d\";\n sslmode = \"verify-full\"; };\n",
                 want);
    expect_error("kafka = { brokers = \"b\"; };\npostgres = { dbname = \"d\"; sslmode = \"verify-ca\"; };\n",
                 "name its file in 'postgres.sslrootcert'");
    snprintf(want, sizeof(want), "%s:3: 'postgres.sslrootcert': /nonexistent/ca.crt: cannot read", path);
    expect_error("kafka = { brokers = \"b\"; };\npostgres = { dbname = \"d\";\n sslrootcert = \"/nonexistent/ca.crt\"; "
                 "sslmode = \"verify-full\"; };\n",
                 want);
    expect_error("kafka = { brokers = \"b\"; ssl_ca_file = \"/nonexistent/ca.crt\"; security_protocol = \"ssl\"; };\n"
                 "postgres = { dbname = \"d\"; };\n",
                 "'kafka.ssl_ca_file': /nonexistent/ca.crt: cannot read");
    expect_error("kafka = { brokers = \"b\"; };\npostgres = { dbname = \"d\"; sslrootcert = \"/tmp\"; };\n",
                 "/tmp: not a regular file");
    /* Plaintext Kafka never reads its CA file; a CA file that is there loads. */
    snprintf(ca, sizeof(ca), "%s.ca", path);
    FILE *f = fopen(ca, "w");
    assert_non_null(f);
    fclose(f);
    char text[512];
    snprintf(text, sizeof(text),
             "kafka = { brokers = \"b\"; ssl_ca_file = \"/nonexistent/ca.crt\"; };\n"
             "postgres = { dbname = \"d\"; sslmode = \"verify-full\"; sslrootcert = \"%s\"; };\n",
             ca);
    write_cfg(text);
    if (cfg_load(path, &c, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    cfg_free(&c);
    unlink(ca);

    /* auth none beyond loopback: the producer only, and allowed only by
     * producer.allow_insecure_auth (a boolean). */
    const char *open_cfg = MINIMAL "producer = { listen = \"0.0.0.0\"; auth = \"none\"; };\n";
    write_cfg(open_cfg);
    assert_int_equal(cfg_load(path, &c, err, sizeof(err)), 0); /* not the producer */
    cfg_free(&c);
    cfg_role_set(CFG_ROLE_PRODUCER, 0);
    snprintf(want, sizeof(want), "%s:3: 'producer.auth' = \"none\" believes the user_id any client sends", path);
    expect_error(open_cfg, want);
    expect_error(open_cfg, "'producer.listen' = \"0.0.0.0\" is not loopback");
    expect_error(MINIMAL "producer = { listen = \"10.0.0.5\"; };\n", "is not loopback");
    expect_error(MINIMAL "producer = { listen = \"0.0.0.0\"; auth = \"none\"; allow_insecure_auth = 1; };\n",
                 "'producer.allow_insecure_auth' must be true or false");
    static const char *const ok[] = {
        MINIMAL "producer = { listen = \"0.0.0.0\"; auth = \"none\"; allow_insecure_auth = true; };\n",
        MINIMAL "producer = { listen = \"127.0.0.1\"; auth = \"none\"; };\n",
        MINIMAL "producer = { listen = \"0.0.0.0\"; auth = \"jwt\"; };\n", /* its keys: auth_check */
    };
    for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
        write_cfg(ok[i]);
        if (cfg_load(path, &c, err, sizeof(err)) != 0)
            fail_msg("%s: %s", ok[i], err);
        assert_int_equal(c.producer.allow_insecure_auth, i == 0);
        cfg_free(&c);
    }
    cfg_role_set(CFG_ROLE_ADMIN, 0);

    static const char *const lo[] = { "127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1", "localhost" };
    static const char *const not_lo[] = { "0.0.0.0", "::", "10.0.0.5", "::ffff:10.0.0.5", "", "*", "example.com",
                                          "128.0.0.1" };
    for (size_t i = 0; i < ARRAY_SIZE(lo); i++)
        if (!cfg_addr_loopback(lo[i]))
            fail_msg("'%s' is loopback", lo[i]);
    for (size_t i = 0; i < ARRAY_SIZE(not_lo); i++)
        if (cfg_addr_loopback(not_lo[i]))
            fail_msg("'%s' is not loopback", not_lo[i]);
}

/* cfg_where: the file and line a setting comes from, the file alone for a
 * default; a reload's places replace the old ones. */
static void test_where(void **state)
{
    (void)state;
    struct cfg a, b;
    char err[1024], want[96];
    write_cfg(MINIMAL "jwt = {\n  keys = [ ];\n};\n");
    assert_int_equal(cfg_load(path, &a, err, sizeof(err)), 0);
    snprintf(want, sizeof(want), "%s:4", path);
    assert_string_equal(cfg_where(&a, "jwt.keys"), want);
    snprintf(want, sizeof(want), "%s:1", path);
    assert_string_equal(cfg_where(&a, "kafka.brokers"), want);
    assert_string_equal(cfg_where(&a, "redis.port"), path);
    assert_string_equal(cfg_where(&a, "no.such"), "(configuration)");
    write_cfg(MINIMAL "\n\njwt = { keys = [ ]; };\n");
    assert_int_equal(cfg_load(path, &b, err, sizeof(err)), 0);
    cfg_apply_reload(&a, &b);
    snprintf(want, sizeof(want), "%s:5", path);
    assert_string_equal(cfg_where(&a, "jwt.keys"), want);
    cfg_free(&a);
    cfg_free(&b);
    struct cfg z = { 0 };
    assert_string_equal(cfg_where(&z, "jwt.keys"), "(configuration)");
}

static void test_reload_check(void **state)
{
    (void)state;
    struct cfg a, b;
    char err[1024];
    write_cfg(MINIMAL "logging = { level = \"info\"; };\nconsumer = { batch_size = 10; };\n");
    assert_int_equal(cfg_load(path, &a, err, sizeof(err)), 0);
    write_cfg(MINIMAL "logging = { level = \"debug\"; };\nconsumer = { batch_size = 20; };\n");
    assert_int_equal(cfg_load(path, &b, err, sizeof(err)), 0);
    assert_int_equal(cfg_reload_check(&a, &b, err, sizeof(err)), 0); /* both reloadable */
    /* Applying copies exactly the reloadable settings. */
    assert_int_equal(cfg_reloadable_scalar_only(), 1);
    cfg_apply_reload(&a, &b);
    assert_int_equal(a.consumer.batch_size, 20);
    assert_int_equal(a.logging.level, LOG_LVL_DEBUG);
    cfg_free(&b);
    write_cfg(MINIMAL "redis = { port = 7000; };\n");
    assert_int_equal(cfg_load(path, &b, err, sizeof(err)), 0);
    assert_int_equal(cfg_reload_check(&a, &b, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "'redis.port' cannot change on reload"));
    cfg_free(&a);
    cfg_free(&b);
}

static void test_dump_masks_secrets(void **state)
{
    (void)state;
    struct cfg c;
    char err[1024], *out = NULL;
    size_t len = 0;
    char pw[64], text[512];
    snprintf(pw, sizeof(pw), "/tmp/sktest-cfg-pw-%d", (int)getpid());
    FILE *pf = fopen(pw, "w");
    assert_non_null(pf);
    fputs("pg-s3cret\n", pf);
    fclose(pf);
    assert_int_equal(chmod(pw, 0600), 0);
    snprintf(text, sizeof(text),
             "kafka = { brokers = \"b\"; properties = [ \"sasl.password=kafka-s3cret\" ]; };\n"
             "postgres = { dbname = \"d\"; admin_user = \"u\"; admin_password_file = \"%s\"; };\n"
             "redis = { admin_password_file = \"%s.redis\"; };\n",
             pw, pw);
    char rpw[80];
    snprintf(rpw, sizeof(rpw), "%s.redis", pw);
    pf = fopen(rpw, "w");
    assert_non_null(pf);
    fputs("redis-s3cret\n", pf);
    fclose(pf);
    assert_int_equal(chmod(rpw, 0600), 0);
    write_cfg(text);
    assert_int_equal(cfg_load(path, &c, err, sizeof(err)), 0);
    unlink(pw);
    unlink(rpw);
    assert_string_equal(secret_str(c.redis.password[CFG_ROLE_ADMIN]), "redis-s3cret");
    /* the file was read at load; show prints where it is, not what */
    assert_string_equal(secret_str(c.postgres.password[CFG_ROLE_ADMIN]), "pg-s3cret");
    FILE *f = open_memstream(&out, &len);
    cfg_dump(&c, f);
    fclose(f);
    assert_null(strstr(out, "s3cret"));
    assert_non_null(strstr(out, "sasl.password=********"));
    assert_non_null(strstr(out, "brokers = \"b\""));
    assert_non_null(strstr(out, "admin_password_file = \"/tmp/sktest-cfg-pw-"));
    assert_non_null(strstr(out, ".redis\";"));
    free(out);
    cfg_free(&c);
}

/* The reference (docs/configuration.md) describes every setting. */
static void test_every_setting_has_help(void **state)
{
    (void)state;
    const char *p, *h;
    size_t i;
    for (i = 0; (h = cfg_help(i, &p)) != NULL; i++)
        if (h[0] == '\0' || strchr(h, '\n'))
            fail_msg("setting '%s' has no one-line help", p);
    assert_true(i > 50);
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    cfg_reference(f);
    fclose(f);
    assert_non_null(strstr(out, "| `redis.port` | integer | `6379` | 1 – 65535 | restart |  | "));
    assert_non_null(strstr(out, "| `redis.producer_user` | string | `\"producer\"` |  | restart |  | "));
    assert_non_null(
        strstr(out, "| `redis.producer_password_file` | password file | `\"\"` |  | reload, checked |  | "));
    assert_non_null(strstr(out, "| `postgres.consumer_password_file` | password file | `\"\"` |  | reload, checked |  | "));
    assert_non_null(strstr(out, "| `kafka.brokers` | string | *required* |"));
    assert_non_null(strstr(out, "\n## logging\n"));
    free(out);
}

/* Bounds taken from the table, and the one that cannot be (an array size)
 * held to it here. */
static void test_ranges(void **state)
{
    (void)state;
    struct cfg_range r = CFG_RANGE(consumer.batch_size);
    assert_true(r.min == 1 && r.max == 10000);
    r = CFG_RANGE(consumer.workers);
    /* consumer/cmetrics.h sizes the per-worker lock counters at compile
     * time: a wider range in the table would overrun them. */
    assert_true(r.max == CM_MAX_WORKERS);
    /* A setting that is not an integer (redis.host) or does not exist
     * (no.such) has no range to ask for: CFG_RANGE(redis.host) and
     * CFG_RANGE(no.such) do not compile. */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dev_config_loads),
        cmocka_unit_test(test_ha_config_loads),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_order_life_settings),
        cmocka_unit_test(test_payment_settings),
        cmocka_unit_test(test_errors_point_at_file_and_line),
        cmocka_unit_test(test_what_start_refuses),
        cmocka_unit_test(test_wrapped_in_any_layout),
        cmocka_unit_test(test_missing_required_is_named),
        cmocka_unit_test(test_kafka_properties_validated),
        cmocka_unit_test(test_kconf_nagle_off),
        cmocka_unit_test(test_kconf_refused),
        cmocka_unit_test(test_ha_settings),
        cmocka_unit_test(test_unreadable_file),
        cmocka_unit_test(test_trust_rules),
        cmocka_unit_test(test_where),
        cmocka_unit_test(test_reload_check),
        cmocka_unit_test(test_dump_masks_secrets),
        cmocka_unit_test(test_every_setting_has_help),
        cmocka_unit_test(test_ranges),
    };
    return cmocka_run_group_tests_name("cfg", tests, setup, teardown);
}
