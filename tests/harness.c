#include "harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "keys.h"
#include "log.h"
#include "ordersig.h"
#include "paysig.h"
#include "pgconn.h"
#include "rconn.h"
#include "rpipe.h"
#include "secret.h"

const char *harness_root(void)
{
    const char *r = getenv("SECKILL_ROOT");
    return r ? r : ".";
}

char *harness_slurp(const char *rel)
{
    char path[512];
    FILE *f;
    char *buf = NULL;
    long n;
    snprintf(path, sizeof(path), "%s/%s", harness_root(), rel);
    if (!(f = fopen(path, "rb")))
        fail_msg("cannot open %s (run from the repository or set SECKILL_ROOT)", path);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    n = ftell(f);
    assert_true(n > 0);
    rewind(f);
    buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

size_t harness_quoted_list(char *text, const char *after, const char *open, char **words, size_t max)
{
    char *p = strstr(text, after), *end;
    size_t n = 0;
    if (!p)
        fail_msg("'%s' not found", after);
    if (!(p = strstr(p, open)))
        fail_msg("'%s' not found after '%s'", open, after);
    p += strlen(open);
    end = strchr(p, ')');
    assert_non_null(end);
    *end = '\0';
    while ((p = strchr(p, '\'')) != NULL) {
        char *q = strchr(p + 1, '\'');
        assert_non_null(q);
        assert_true(n < max);
        *q = '\0';
        words[n++] = p + 1;
        p = q + 1;
    }
    return n;
}

void harness_filter(void)
{
    const char *only = getenv("SECKILL_TEST_ONLY"), *skip = getenv("SECKILL_TEST_SKIP");
    if (only && *only)
        cmocka_set_test_filter(only);
    if (skip && *skip)
        cmocka_set_skip_filter(skip);
}

void harness_cfg_no_broker(struct cfg *c, const char *topic, const char *dlq_topic)
{
    memset(c, 0, sizeof(*c));
    c->kafka.brokers = (char *)"127.0.0.1:1";
    c->kafka.security_protocol = (char *)"plaintext";
    c->kafka.ssl_ca_file = (char *)"";
    c->kafka.topic = c->kafka.payments_topic = (char *)topic;
    c->kafka.dlq_topic = (char *)dlq_topic;
    c->consumer.instance_id = (char *)"";
}

void harness_cfg(struct cfg *c)
{
    char path[512], err[1024], prefix[64], rnd[9];
    const char *p = getenv("SECKILL_TEST_CONFIG");
    if (p == NULL) {
        snprintf(path, sizeof(path), "%s/config/seckill.cfg", harness_root());
        p = path;
    }
    /* In-process modules connect as the consumer (the consumer's sink is
     * the one exercised in-process); the tests' own setup, checks and
     * cleanup run as admin (harness_pg), and the privilege tests act as
     * each role: every role's password is read. */
    cfg_role_set(CFG_ROLE_CONSUMER, CFG_ROLE_BIT(CFG_ROLE_PRODUCER) | CFG_ROLE_BIT(CFG_ROLE_CONSUMER) |
                                        CFG_ROLE_BIT(CFG_ROLE_ADMIN));
    if (cfg_load(p, c, err, sizeof(err)) != 0)
        fail_msg("test config: %s", err);
    /* The tests that publish orders sign them as a producer does
     * (osig_sign), or the consumer dead-letters them. */
    if (osig_load(c, err, sizeof(err)) != 0)
        fail_msg("test config: %s", err);
    /* And the payments they publish as the payment service does (psig_sign),
     * or the consumer dead-letters those. */
    if (psig_load(c, err, sizeof(err)) != 0)
        fail_msg("test config: %s", err);
    log_setup("test", getenv("SECKILL_TEST_DEBUG") ? LOG_LVL_DEBUG : LOG_LVL_NOTICE, LOG_FMT_PLAIN);
    assert_int_equal(util_random_hex(rnd, 4), 0);
    snprintf(prefix, sizeof(prefix), "sktest-%d-%s", (int)getpid(), rnd);
    free(c->redis.key_prefix);
    c->redis.key_prefix = strdup(prefix);
}

struct cfg harness_conf;

int harness_setup(void **state)
{
    (void)state;
    harness_cfg(&harness_conf);
    return 0;
}

int harness_teardown(void **state)
{
    (void)state;
    harness_redis_cleanup(&harness_conf);
    cfg_free(&harness_conf);
    return 0;
}

const char *harness_stack_dir(void)
{
    static char dir[512];
    const char *d = getenv("SECKILL_STACK_DIR");
    if (d && *d)
        return d;
    snprintf(dir, sizeof(dir), "%s/.stack", harness_root());
    return dir;
}

int harness_stack_secret(const char *name, struct secret **out, char *err, size_t errlen)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/secrets/%s", harness_stack_dir(), name);
    return secret_read(path, out, err, errlen);
}

rd_kafka_conf_t *harness_kafka_conf(const struct cfg *c, const char *user)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char err[512], name[80];
    struct secret *pw = NULL;
    const char *props[][2] = {
        { "bootstrap.servers", c->kafka.brokers },
        { "security.protocol", c->kafka.security_protocol },
        { "sasl.mechanisms", c->kafka.sasl_mechanism },
        { "sasl.username", user },
        { "ssl.ca.location", *c->kafka.ssl_ca_file ? c->kafka.ssl_ca_file : NULL },
    };
    for (size_t i = 0; i < sizeof(props) / sizeof(props[0]); i++)
        if (props[i][1] && rd_kafka_conf_set(conf, props[i][0], props[i][1], err, sizeof(err)) != RD_KAFKA_CONF_OK)
            fail_msg("kafka conf %s: %s", props[i][0], err);
    if (cfg_kafka_sasl(c)) {
        snprintf(name, sizeof(name), "kafka-%s", user);
        if (harness_stack_secret(name, &pw, err, sizeof(err)) != 0)
            fail_msg("%s", err);
        if (rd_kafka_conf_set(conf, "sasl.password", secret_str(pw), err, sizeof(err)) != RD_KAFKA_CONF_OK)
            fail_msg("kafka conf sasl.password: %s", err);
        secret_free(pw);
    }
    return conf;
}

/* The topic's partition count once every partition has a leader; 0 when
 * the brokers do not know it; -1 while they do not say. */
static int topic_partitions(rd_kafka_t *rk, const char *name)
{
    const rd_kafka_metadata_t *md = NULL;
    rd_kafka_topic_t *t = rd_kafka_topic_new(rk, name, NULL);
    int n = -1;
    if (t && rd_kafka_metadata(rk, 0, t, &md, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        if (md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
            n = 0;
        else if (md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR) {
            n = md->topics[0].partition_cnt;
            for (int i = 0; i < md->topics[0].partition_cnt; i++)
                if (md->topics[0].partitions[i].leader < 0)
                    n = -1;
        }
        rd_kafka_metadata_destroy(md);
    }
    if (t)
        rd_kafka_topic_destroy(t);
    return n;
}

/* One CreateTopics or DeleteTopics for name, then until the brokers' metadata
 * shows want partitions (0: the topic gone). */
static int topic_admin(const struct cfg *c, const char *name, int parts, int want)
{
    char err[512];
    int ret = -1;
    bool ok;
    rd_kafka_conf_t *conf = harness_kafka_conf(c, "admin");
    if (rd_kafka_conf_set(conf, "log_level", "3", err, sizeof(err)) != RD_KAFKA_CONF_OK)
        fail_msg("kafka conf log_level: %s", err);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (!rk)
        fail_msg("rd_kafka_new: %s", err);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_event_t *ev = NULL;
    const rd_kafka_topic_result_t **tr = NULL;
    size_t n = 0;
    if (parts > 0) {
        rd_kafka_NewTopic_t *nt = rd_kafka_NewTopic_new(name, parts, -1, err, sizeof(err));
        if (!nt) {
            printf("# topic %s: %s\n", name, err);
            goto done;
        }
        rd_kafka_CreateTopics(rk, &nt, 1, NULL, q);
        rd_kafka_NewTopic_destroy(nt);
        if ((ev = rd_kafka_queue_poll(q, 30000)) && rd_kafka_event_CreateTopics_result(ev))
            tr = rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &n);
    } else {
        rd_kafka_DeleteTopic_t *dt = rd_kafka_DeleteTopic_new(name);
        rd_kafka_DeleteTopics(rk, &dt, 1, NULL, q);
        rd_kafka_DeleteTopic_destroy(dt);
        if ((ev = rd_kafka_queue_poll(q, 30000)) && rd_kafka_event_DeleteTopics_result(ev))
            tr = rd_kafka_DeleteTopics_result_topics(rd_kafka_event_DeleteTopics_result(ev), &n);
    }
    if (!ev || rd_kafka_event_error(ev) || n != 1) {
        printf("# topic %s: %s\n", name, !ev ? "no answer within 30 s" : rd_kafka_event_error_string(ev));
        goto done;
    }
    if (rd_kafka_topic_result_error(tr[0]) != RD_KAFKA_RESP_ERR_NO_ERROR &&
        !(parts == 0 && rd_kafka_topic_result_error(tr[0]) == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)) {
        printf("# topic %s: %s\n", name, rd_kafka_topic_result_error_string(tr[0]));
        goto done;
    }
    WAIT_UNTIL(topic_partitions(rk, name) == want, 30000, ok);
    if (!ok) {
        printf("# topic %s: not %s within 30 s\n", name, want ? "ready" : "gone");
        goto done;
    }
    ret = 0;
done:
    if (ev)
        rd_kafka_event_destroy(ev);
    rd_kafka_queue_destroy(q);
    rd_kafka_destroy(rk);
    return ret;
}

int harness_topic_create(const struct cfg *c, const char *name, int parts)
{
    return parts > 0 ? topic_admin(c, name, parts, parts) : -1;
}

int harness_topic_delete(const struct cfg *c, const char *name)
{
    return topic_admin(c, name, 0, 0);
}

/* The stack's user's password, read once for the whole process. */
static struct secret *stack_password(char *err, size_t errlen)
{
    static struct secret *pw;
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&mu);
    if (!pw && harness_stack_secret("redis-stack", &pw, err, errlen) != 0)
        pw = NULL;
    struct secret *got = pw;
    pthread_mutex_unlock(&mu);
    return got;
}

int harness_redis_open(const struct cfg *c, redisContext **out, char *err, size_t errlen)
{
    struct secret *pw = stack_password(err, errlen);
    return pw ? rconn_open_user(c, "stack", pw, out, err, errlen) : -1;
}

int harness_rp_open(const struct cfg *c, struct rp **out, char *err, size_t errlen)
{
    struct secret *pw = stack_password(err, errlen);
    return pw ? rp_open_user(c, "stack", pw, out, err, errlen) : -1;
}

int harness_cluster_up(void)
{
    char log[128];
    snprintf(log, sizeof(log), "/tmp/sktest-cluster-up-%d.log", (int)getpid());
    if (harness_sh("'%s/scripts/stack' up --cluster >'%s' 2>&1", harness_root(), log) != 0) {
        harness_sh("tail -n 20 '%s' | sed 's/^/# /' >&2", log);
        return -1;
    }
    unlink(log);
    return 0;
}

redisContext *harness_redis(const struct cfg *c)
{
    redisContext *rc = NULL;
    char err[256];
    if (harness_redis_open(c, &rc, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    return rc;
}

static redisReply *vcmd(redisContext *rc, const char *fmt, va_list ap)
{
    redisReply *r = redisvCommand(rc, fmt, ap);
    if (r == NULL)
        fail_msg("redis: %s", rc->errstr);
    return r;
}

redisReply *harness_cmd(redisContext *rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = vcmd(rc, fmt, ap);
    va_end(ap);
    return r;
}

long long harness_int(redisContext *rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = vcmd(rc, fmt, ap);
    va_end(ap);
    long long v = -1;
    if (r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    else if (r->type == REDIS_REPLY_STRING)
        v = strtoll(r->str, NULL, 10);
    freeReplyObject(r);
    return v;
}

void harness_redis_cleanup(const struct cfg *c)
{
    assert_int_equal(harness_redis_drop(c), 0);
}

/* One primary's keys under the pattern: SCAN, then DEL each (routed by its
 * key, so a Cluster's slot moved meanwhile still finds it). */
static int drop_on(struct rp *p, int node, const char *pattern)
{
    char cursor[32] = "0", err[256];
    int ret = 0;
    do {
        struct rp_batch b;
        rp_batch_init(&b);
        rp_addf(&b, NULL, "SCAN %s MATCH %s COUNT 1000", cursor, pattern);
        const redisReply *r = rp_run_on(p, node, &b, err, sizeof(err)) == 0 ? rp_reply(&b, 0) : NULL;
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING) {
            rp_batch_free(&b);
            return -1;
        }
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        struct rp_batch del;
        rp_batch_init(&del);
        for (size_t i = 0; i < r->element[1]->elements; i++) {
            const char *k = r->element[1]->element[i]->str;
            rp_addf(&del, k, "DEL %s", k);
        }
        if (rp_run(p, &del, err, sizeof(err)) != 0)
            ret = -1;
        rp_batch_free(&del);
        rp_batch_free(&b);
    } while (strcmp(cursor, "0") != 0);
    return ret;
}

int harness_redis_drop(const struct cfg *c)
{
    char err[256], pattern[KEYS_MAX];
    struct rp *p = NULL;
    if (harness_rp_open(c, &p, err, sizeof(err)) != 0)
        return -1;
    snprintf(pattern, sizeof(pattern), "%s:*", c->redis.key_prefix);
    int ret = 0;
    for (int node = 0; node < rp_nodes(p); node++)
        if (drop_on(p, node, pattern) != 0)
            ret = -1;
    rp_close(p);
    return ret;
}

PGconn *harness_pg(const struct cfg *c)
{
    PGconn *pg = NULL;
    char err[512];
    if (pgconn_open_as(c, CFG_ROLE_ADMIN, "seckill-tests", &pg, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    return pg;
}

void harness_redis_restart(void)
{
    char cmd[1024];
    /* SHUTDOWN fsyncs the AOF before exiting; the reply never comes. */
    snprintf(cmd, sizeof(cmd), "'%s/scripts/stack' redis-cli stack shutdown >/dev/null 2>&1", harness_root());
    int rc = system(cmd);
    (void)rc;
    snprintf(cmd, sizeof(cmd), "'%s/scripts/stack' up >/dev/null", harness_root());
    /* `up` waits for each service itself, with a deadline. */
    if (system(cmd) != 0)
        fail_msg("scripts/stack up failed after the Redis shutdown");
}

void harness_cfg_file(const struct cfg *c, char *path, size_t len)
{
    FILE *f;
    snprintf(path, len, "/tmp/seckill-test-XXXXXX.cfg");
    int fd = mkstemps(path, 4);
    assert_true(fd >= 0);
    f = fdopen(fd, "w");
    assert_non_null(f);
    cfg_write(c, f);
    assert_int_equal(fclose(f), 0);
}

void harness_bin(const char *name, char *out, size_t len)
{
    char exe[512];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    assert_true(n > 0);
    exe[n] = 0;
    /* BUILD/tests/{unit,it}/NAME -> BUILD */
    char *d = dirname(dirname(dirname(exe)));
    snprintf(out, len, "%s/%s", d, name);
    assert_int_equal(access(out, X_OK), 0);
}

/* Every child started, so that a failed test leaves no daemon behind. */
static pid_t spawned[64];
static size_t nspawned;

static void kill_spawned(void)
{
    for (size_t i = 0; i < nspawned; i++)
        if (spawned[i] > 0 && kill(spawned[i], 0) == 0) {
            kill(spawned[i], SIGKILL);
            waitpid(spawned[i], NULL, 0);
        }
    nspawned = 0;
}

pid_t harness_spawn(char *const argv[], const char *logpath)
{
    static bool registered;
    pid_t pid;
    if (!registered)
        atexit(kill_spawned);
    registered = true;
    pid = fork();
    assert_true(pid >= 0);
    if (pid > 0 && nspawned < ARRAY_SIZE(spawned))
        spawned[nspawned++] = pid;
    if (pid == 0) {
        if (logpath) {
            int fd = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0644);
            if (fd < 0)
                _exit(127);
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

/* pid was reaped: the number may be reused, so it is no longer ours to kill. */
static void forget_spawned(pid_t pid)
{
    for (size_t i = 0; i < nspawned; i++)
        if (spawned[i] == pid)
            spawned[i] = 0;
}

int harness_wait_exit(pid_t pid, int timeout_ms)
{
    int64_t end = util_mono_ms() + timeout_ms;
    bool timed_out = false;
    int st;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r < 0)
            return -1;
        if (r == pid)
            break;
        if (!timed_out && util_mono_ms() >= end) {
            kill(pid, SIGKILL);
            timed_out = true;
        }
        util_sleep_ms(10);
    }
    forget_spawned(pid);
    if (timed_out)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int harness_wait_stopped(pid_t pid, int timeout_ms)
{
    int64_t end = util_mono_ms() + timeout_ms;
    int st;
    for (;;) {
        /* WUNTRACED: the parent hears of the stop once the group stop is
         * complete, that is once the last thread has stopped. */
        pid_t r = waitpid(pid, &st, WNOHANG | WUNTRACED);
        if (r == pid && WIFSTOPPED(st))
            return 0;
        if (r == pid) { /* it exited: reaped here */
            forget_spawned(pid);
            return -1;
        }
        if (r < 0 || util_mono_ms() >= end)
            return -1;
        util_sleep_ms(2);
    }
}

int harness_connect(int port)
{
    struct sockaddr_in sa = { 0 };
    struct timeval tv = { 15, 0 };
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int harness_run(char **out, const char *bin, const char *const *args, int timeout_ms)
{
    char path[512], log[] = "/tmp/seckill-run-XXXXXX";
    char *argv[24];
    int n = 0, fd = mkstemp(log);
    size_t len;
    assert_true(fd >= 0);
    close(fd);
    harness_bin(bin, path, sizeof(path));
    argv[n++] = path;
    for (; *args && n < 23; args++)
        argv[n++] = (char *)*args;
    argv[n] = NULL;
    int st = harness_wait_exit(harness_spawn(argv, log), timeout_ms);
    *out = NULL;
    assert_int_equal(util_read_file(log, out, &len), 0);
    unlink(log);
    return st;
}

int harness_order(int port, int64_t user, int64_t item, char *resp, size_t resplen)
{
    char body[128];
    snprintf(body, sizeof(body), "{\"user_id\":%" PRId64 ",\"item_id\":%" PRId64 "}", user, item);
    return harness_http(port, "POST", "/api/v1/seckill", "application/json", body, resp, resplen);
}

int64_t harness_item_create(const char *cfgpath, int64_t item, int64_t stock)
{
    char ctl[512], id[24], st[24];
    harness_bin("seckillctl", ctl, sizeof(ctl));
    snprintf(id, sizeof(id), "%" PRId64, item);
    snprintf(st, sizeof(st), "%" PRId64, stock);
    char *argv[] = { ctl, "-c", (char *)cfgpath, "item", "create", "--id", id, "--stock", st, NULL };
    assert_int_equal(harness_wait_exit(harness_spawn(argv, "/dev/null"), 30000), 0);
    return item;
}

int harness_http(int port, const char *method, const char *path, const char *ctype,
                 const char *body, char *resp, size_t resplen)
{
    return harness_http_hdr(port, method, path, ctype, NULL, NULL, body, resp, resplen);
}

int harness_http_hdr(int port, const char *method, const char *path, const char *ctype, const char *hdr,
                     const char *value, const char *body, char *resp, size_t resplen)
{
    /* the whole answer: a /metrics page is tens of KiB */
    enum { BUF_MAX = 1 << 20 };
    char head[1024], *buf = NULL;
    size_t blen = body ? strlen(body) : 0, got = 0;
    int fd = harness_connect(port), n, status = -1;
    if (resp && resplen)
        resp[0] = 0;
    if (fd < 0)
        return -1;
    if (!(buf = malloc(BUF_MAX)))
        goto out;
    n = snprintf(head, sizeof(head),
                 "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s%s%s%s%s%s%s"
                 "Content-Length: %zu\r\n\r\n",
                 method, path, ctype ? "Content-Type: " : "", ctype ? ctype : "", ctype ? "\r\n" : "",
                 hdr ? hdr : "", hdr ? ": " : "", hdr ? value : "", hdr ? "\r\n" : "", blen);
    if (n < 0 || (size_t)n >= sizeof(head))
        goto out;
    if (write(fd, head, (size_t)n) != n || (blen && write(fd, body, blen) != (ssize_t)blen))
        goto out;
    while (got < BUF_MAX - 1) {
        ssize_t r = read(fd, buf + got, BUF_MAX - 1 - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    buf[got] = 0;
    if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
        status = -1;
    if (resp && resplen) {
        const char *b = strstr(buf, "\r\n\r\n");
        snprintf(resp, resplen, "%s", b ? b + 4 : "");
    }
out:
    free(buf);
    close(fd);
    return status;
}

/* The ports handed out lately, by this process (tests ask from their main
 * thread). A port is free again once its socket closes, and the daemon it is
 * meant for may not have bound it yet when the next one is asked for: the
 * kernel handed one out twice in a row in CI (a producer's metrics port, then
 * a consumer's). */
#define HANDED_MAX 256
static int handed[HANDED_MAX];
static unsigned handed_n;

static bool handed_lately(int port)
{
    for (unsigned i = 0; i < HANDED_MAX && i < handed_n; i++)
        if (handed[i] == port)
            return true;
    return false;
}

void harness_free_ports(int n, int *out)
{
    int fds[8 + 32], nfd = 0;
    assert_true(n > 0 && n <= 8);
    /* Every socket stays bound until all are asked: the kernel cannot hand
     * out one port twice. One handed out lately is kept bound too, and
     * another asked for instead. */
    for (int i = 0; i < n;) {
        struct sockaddr_in sa = { 0 };
        socklen_t len = sizeof(sa);
        assert_true(nfd < (int)ARRAY_SIZE(fds));
        fds[nfd] = socket(AF_INET, SOCK_STREAM, 0);
        assert_true(fds[nfd] >= 0);
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        assert_int_equal(bind(fds[nfd], (struct sockaddr *)&sa, sizeof(sa)), 0);
        assert_int_equal(getsockname(fds[nfd], (struct sockaddr *)&sa, &len), 0);
        nfd++;
        if (handed_lately(ntohs(sa.sin_port)))
            continue;
        out[i++] = ntohs(sa.sin_port);
        handed[handed_n++ % HANDED_MAX] = ntohs(sa.sin_port);
    }
    for (int i = 0; i < nfd; i++)
        close(fds[i]);
}

int harness_free_port(void)
{
    int port;
    harness_free_ports(1, &port);
    return port;
}

void harness_producer_ports(struct cfg *c)
{
    int p[2];
    harness_free_ports(2, p);
    c->producer.port = p[0];
    c->producer.metrics_port = p[1];
}

void harness_set_str(char **field, const char *v)
{
    free(*field);
    *field = strdup(v);
    assert_non_null(*field);
}

void harness_props_set(struct cfg_props *p, const char *k, const char *v)
{
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->keys[i], k) == 0) {
            harness_set_str(&p->values[i], v);
            return;
        }
    p->keys = realloc(p->keys, (p->n + 1) * sizeof(char *));
    p->values = realloc(p->values, (p->n + 1) * sizeof(char *));
    assert_non_null(p->keys);
    assert_non_null(p->values);
    p->keys[p->n] = strdup(k);
    p->values[p->n] = strdup(v);
    assert_non_null(p->keys[p->n]);
    assert_non_null(p->values[p->n]);
    p->n++;
}

int harness_sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    int st = system(cmd);
    return st == -1 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

long long harness_over_count(const char *path, const char *needle)
{
    char line[4096];
    long long n = -1;
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f)) {
        const char *a = strstr(line, needle);
        long long k;
        if (a && (a = strstr(a, ") after ")) && sscanf(a, ") after %lld time", &k) == 1 && k > n)
            n = k;
    }
    fclose(f);
    return n;
}

int harness_file_lines(const char *path, const char *needle)
{
    char line[4096];
    int n = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    while (fgets(line, sizeof(line), f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

void harness_write_secret(const char *path, const char *content)
{
    char tmp[600];
    snprintf(tmp, sizeof(tmp), "%s.new", path);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    assert_int_equal(chmod(tmp, 0600), 0);
    fprintf(f, "%s\n", content);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(rename(tmp, path), 0);
}

bool harness_file_has(const char *path, const char *needle)
{
    char *buf = NULL;
    size_t len;
    if (util_read_file(path, &buf, &len) != 0)
        return false;
    bool found = strstr(buf, needle) != NULL;
    free(buf);
    return found;
}

int harness_pg_try(const struct cfg *c, const char *sql, int64_t a1, int64_t a2)
{
    char err[256], p[2][24];
    PGconn *pg = NULL;
    int ret = -1;
    if (pgconn_open_as(c, CFG_ROLE_ADMIN, "seckill-tests", &pg, err, sizeof(err)) != 0)
        return -1;
    snprintf(p[0], sizeof(p[0]), "%" PRId64, a1);
    snprintf(p[1], sizeof(p[1]), "%" PRId64, a2);
    const char *params[] = { p[0], p[1] };
    PGresult *r = PQexecParams(pg, sql, strstr(sql, "$2") ? 2 : 1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) == PGRES_COMMAND_OK)
        ret = 0;
    PQclear(r);
    PQfinish(pg);
    return ret;
}

/* Keysets already loaded, by what configured them; freed at exit. */
static struct {
    char *conf;
    struct jwt_keyset *ks;
} keysets[16];
static size_t nkeysets;

static void keysets_free(void)
{
    for (size_t i = 0; i < nkeysets; i++) {
        jwt_keyset_free(keysets[i].ks);
        free(keysets[i].conf);
    }
    nkeysets = 0;
}

/* Every jwt setting a keyset copies, as one string. */
static char *keys_conf(const struct cfg *c)
{
    char *s = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&s, &len);
    assert_non_null(f);
    fprintf(f, "%s\n%s\n%s\n%s\n%d %d\n", c->jwt.key_dir ? c->jwt.key_dir : "", c->jwt.issuer ? c->jwt.issuer : "",
            c->jwt.audience ? c->jwt.audience : "", c->jwt.signing_key ? c->jwt.signing_key : "", c->jwt.leeway_s,
            c->jwt.max_token_bytes);
    for (size_t i = 0; i < c->jwt.keys.n; i++)
        fprintf(f, "k %s\n", c->jwt.keys.v[i]);
    for (size_t i = 0; i < c->jwt.algorithms.n; i++)
        fprintf(f, "a %s\n", c->jwt.algorithms.v[i]);
    assert_int_equal(fclose(f), 0);
    return s;
}

const struct jwt_keyset *harness_keys(const struct cfg *c)
{
    static bool registered;
    char err[512], *conf = keys_conf(c);
    struct jwt_keyset *ks = NULL;
    for (size_t i = 0; i < nkeysets; i++)
        if (strcmp(keysets[i].conf, conf) == 0) {
            free(conf);
            return keysets[i].ks;
        }
    if (jwt_keyset_load(c, JWT_USE_SIGN, &ks, err, sizeof(err)) != 0) {
        free(conf);
        fail_msg("jwt keys: %s", err);
    }
    if (nkeysets == ARRAY_SIZE(keysets)) {
        free(conf);
        jwt_keyset_free(ks);
        fail_msg("harness_keys: more than %zu key configurations", ARRAY_SIZE(keysets));
    }
    if (!registered)
        atexit(keysets_free);
    registered = true;
    keysets[nkeysets].conf = conf;
    keysets[nkeysets].ks = ks;
    nkeysets++;
    return ks;
}

void harness_token(const struct cfg *c, int64_t user, char *out, size_t len)
{
    char err[256], *tok = NULL;
    int64_t now = util_wall_ms() / 1000;
    if (jwt_sign(harness_keys(c), NULL, user, now, now + 3600, &tok, err, sizeof(err)) != 0)
        fail_msg("jwt_sign: %s", err);
    size_t n = strlen(tok);
    if (n >= len) {
        free(tok);
        fail_msg("harness_token: a token of %zu bytes does not fit in %zu", n, len);
    }
    memcpy(out, tok, n + 1);
    free(tok);
}

redisReply *harness_resp(const char *text)
{
    redisReader *rd = redisReaderCreate();
    assert_non_null(rd);
    assert_int_equal(redisReaderFeed(rd, text, strlen(text)), REDIS_OK);
    void *r = NULL;
    assert_int_equal(redisReaderGetReply(rd, &r), REDIS_OK);
    assert_non_null(r);
    redisReaderFree(rd);
    return r;
}
