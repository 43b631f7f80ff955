/* The scale-out run (issue #9): the pipeline with every tier scaled out, and
 * a crash in two of them in the middle of a sale.
 *
 *   - Kafka: the three-node cluster (scripts/stack up --brokers 3), a topic of
 *     six partitions with replication factor 3 and min.insync.replicas 2;
 *   - two producers on two ports, the buyers' connections spread over both
 *     (and failing over, as behind a load balancer);
 *   - three consumer instances in one group (one configuration, -i 0/1/2:
 *     static members, metrics on consumer.metrics_port + N).
 *
 * A sale of STOCK units, REQUESTS paced requests from USERS users, one user's
 * HAMMER concurrent requests at its start. While units are still being sold,
 * one consumer instance and then one broker (the one coordinating the
 * consumer group, which also leads partitions of the topic) are SIGKILLed;
 * the sale goes on. A daemon that exits by itself (a fatal librdkafka error
 * exits 1) is started again, as systemd's Restart=on-failure would. The
 * broker stays down until the invariants were checked with two of three
 * brokers (min ISR 2 still holds, so the sale must not need the third); then
 * it is started again and must rejoin every ISR, and the pipeline must still
 * be healthy and reconcile.
 *
 * Checked: every 202 has its row (nothing lost), no row unexplained, one order
 * per user, sold == stock, nothing oversold or dead-lettered, the hammering
 * user got one unit, every surviving consumer instance is a working member
 * again (the group spread all partitions over them), and
 * `seckillctl reconcile --item ID` is clean.
 *
 * Own topic, dead-letter topic, consumer group, item, users and Redis key
 * prefix, all removed at the end; the cluster is stopped at the very end
 * (group teardown), whatever happened. */
#include "harness.h"
#include "sale.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pgconn.h"
#include "rconn.h"

enum {
    STOCK = 400,
    REQUESTS = 4000,
    USERS = 3000,
    /* 400 units go in the first 1.6 s at this pace if nothing stalls: the
     * faults, injected at 20% and 30% of the stock, land while most of it
     * is still to sell. The rest of the requests (sold out) keep coming for
     * about 16 s in all, through the broker's failover and the group's
     * rebalance. */
    RATE = 250,
    CONNS = 32,
    HAMMER = 100,
    PRODUCERS = 2,
    CONSUMERS = 3,
    PARTS = 6,
    BROKERS = 3,
    CONSUMER_KILL_AT = STOCK / 5,
    BROKER_KILL_AT = STOCK * 3 / 10,
    KILLED_CONSUMER = 1,
    HAMMER_USER_OFFSET = 999999,
    USER_SPAN = 1000000,
    /* A broker killed without a controlled shutdown keeps its partitions
     * (as leader, and in the ISR of the others) until the controller fences
     * it, broker.session.timeout.ms (9 s) later: deliveries must outlast that. */
    MSG_TIMEOUT_MS = 15000,
    REQUEST_TIMEOUT_MS = 30000, /* the buyers wait longer than the producers' delivery timeout */
    SESSION_TIMEOUT_MS = 6000,  /* the broker's minimum */
    LOCK_TTL_MS = 3000,         /* the killed consumer's user locks free up soon */
    START_MS = 60000,
    TAKEOVER_MS = 60000,
    SALE_MAX_MS = 180000,
    SETTLE_MS = 90000,
    GROUP_DELETE_MS = 20000,
};

#define CLUSTER "127.0.0.1:19192,127.0.0.1:19193,127.0.0.1:19194"

struct dmn {
    const char *bin;
    const char *cfg;
    char log[192];
    int port;  /* producer HTTP, consumer metrics */
    int mport; /* /metrics: the producer's operator listener, the consumer's port */
    int instance; /* consumer -i N; -1 for producers */
    int respawns; /* started again after exiting by itself */
    pid_t pid;
};

struct run {
    struct cfg c;
    char cfg[PRODUCERS][128]; /* cfg[0]: the consumers' and seckillctl's too */
    char topic[128], dlq[160], group[128], instance_id[96];
    bool topic_made, dlq_made;
    int64_t item, user_base;
    struct dmn prod[PRODUCERS], cons[CONSUMERS];
    int prod_ports[PRODUCERS];
    int prod_mports[PRODUCERS]; /* their operator listeners */
    struct sale *sale;
    int restarts;      /* surviving consumers restarted after exiting by themselves */
    int prod_restarts; /* producers restarted after exiting by themselves */
    int killed_broker; /* node id, 0: none */
    bool broker_back;
    bool passed;
    int64_t t0;
};

static struct run run;
static rd_kafka_t *meta; /* metadata and admin requests to the cluster */

/* --- small helpers ------------------------------------------------------------ */

/* scripts/stack ARGS, its output kept to show when it fails. */
static int stack(const char *fmt, ...)
{
    char args[512], out[] = "/tmp/seckill-scaleout-stack-XXXXXX";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    int fd = mkstemp(out);
    if (fd < 0)
        return -1;
    close(fd);
    int st = harness_sh("'%s/scripts/stack' %s >'%s' 2>&1", harness_root(), args, out);
    if (st != 0) {
        fprintf(stderr, "# scripts/stack %s: exit %d\n", args, st);
        fflush(stderr);
        harness_sh("tail -n 30 '%s' | sed 's/^/#   /' >&2", out);
    }
    unlink(out);
    return st;
}

static double secs(int64_t ms) { return (double)ms / 1000.0; }

static bool port_free(int port)
{
    struct sockaddr_in sa = { 0 };
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    bool ok;
    if (fd < 0 || port <= 0 || port > 65535) {
        if (fd >= 0)
            close(fd);
        return false;
    }
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return ok;
}

static bool port_taken(const struct run *r, int port, int nprod)
{
    for (int i = 0; i < nprod; i++)
        if (r->prod_ports[i] == port || r->prod_mports[i] == port)
            return true;
    return false;
}

static int healthz(int port)
{
    int status;
    free(sale_http_get(port, "/healthz", &status));
    return status;
}

/* A metric summed over the running daemons of a tier. */
static int64_t metric_sum(struct dmn *d, int n, const char *name)
{
    int64_t sum = 0;
    for (int i = 0; i < n; i++)
        if (d[i].pid > 0) {
            int64_t v = sale_metric(d[i].mport, name);
            if (v > 0)
                sum += v;
        }
    return sum;
}

static int64_t assigned(struct dmn *c)
{
    return c->pid > 0 ? sale_metric(c->mport, "seckill_consumer_assigned_partitions") : 0;
}

/* Partitions of topic led by each node (index = node id), all with a leader. */
static bool leaders(const char *topic, int parts, int led[BROKERS + 1])
{
    const rd_kafka_metadata_t *md = NULL;
    rd_kafka_topic_t *t = rd_kafka_topic_new(meta, topic, NULL);
    bool ok = false;
    memset(led, 0, sizeof(int) * (BROKERS + 1));
    if (t && rd_kafka_metadata(meta, 0, t, &md, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        ok = md->topic_cnt == 1 && md->topics[0].err == 0 && md->topics[0].partition_cnt == parts;
        for (int i = 0; ok && i < parts; i++) {
            int32_t l = md->topics[0].partitions[i].leader;
            ok = l >= 1 && l <= BROKERS && md->topics[0].partitions[i].isr_cnt >= 2;
            if (ok)
                led[l]++;
        }
        rd_kafka_metadata_destroy(md);
    }
    if (t)
        rd_kafka_topic_destroy(t);
    return ok;
}

static void topic_make(const char *name, int parts)
{
    int led[BROKERS + 1];
    bool ok;
    if (stack("topic --brokers 3 create '%s' %d", name, parts) != 0)
        fail_msg("scripts/stack topic --brokers 3 create %s failed", name);
    WAIT_UNTIL(leaders(name, parts, led), 30000, ok);
    if (!ok)
        fail_msg("topic %s has no leaders after 30 s", name);
}

/* The end offset summed over a topic's partitions (-1 if unknown). A fresh
 * handle each time (fresh leaders), and offsets_for_times (latest) rather
 * than query_watermark_offsets: in librdkafka 2.0.2 the latter ignores its
 * timeout and waits forever while the leader it knows of is down
 * (librdkafka #2588, fixed in 2.3.0 by #4460). */
static int64_t topic_end(const char *topic, int parts)
{
    char err[256];
    int64_t sum = 0;
    rd_kafka_conf_t *conf = harness_kafka_conf(&harness_conf, "admin");
    if (rd_kafka_conf_set(conf, "bootstrap.servers", CLUSTER, err, sizeof(err)) != RD_KAFKA_CONF_OK ||
        rd_kafka_conf_set(conf, "log_level", "0", err, sizeof(err)) != RD_KAFKA_CONF_OK) {
        rd_kafka_conf_destroy(conf);
        return -1;
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
    if (!rk) {
        rd_kafka_conf_destroy(conf);
        return -1;
    }
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(parts);
    for (int i = 0; i < parts; i++)
        rd_kafka_topic_partition_list_add(l, topic, i)->offset = RD_KAFKA_OFFSET_END;
    if (rd_kafka_offsets_for_times(rk, l, 5000) != RD_KAFKA_RESP_ERR_NO_ERROR)
        sum = -1;
    for (int i = 0; i < l->cnt && sum >= 0; i++) {
        if (l->elems[i].err || l->elems[i].offset < 0)
            sum = -1;
        else
            sum += l->elems[i].offset;
    }
    rd_kafka_topic_partition_list_destroy(l);
    rd_kafka_destroy(rk);
    return sum;
}

/* Delete the consumer group; a static member's session outlives its process
 * by session.timeout.ms (static members never leave on close), so a group
 * still "not empty" is asked again until the deadline. */
static int group_delete(const char *group, int timeout_ms)
{
    int64_t end = util_mono_ms() + timeout_ms;
    rd_kafka_resp_err_t e = RD_KAFKA_RESP_ERR__TIMED_OUT;
    char err[256];
    do {
        rd_kafka_queue_t *q = rd_kafka_queue_new(meta);
        rd_kafka_AdminOptions_t *o = rd_kafka_AdminOptions_new(meta, RD_KAFKA_ADMIN_OP_DELETEGROUPS);
        rd_kafka_DeleteGroup_t *g = rd_kafka_DeleteGroup_new(group);
        rd_kafka_AdminOptions_set_request_timeout(o, 10000, err, sizeof(err));
        rd_kafka_DeleteGroups(meta, &g, 1, o, q);
        rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 15000);
        e = RD_KAFKA_RESP_ERR__TIMED_OUT;
        if (ev) {
            e = rd_kafka_event_error(ev);
            const rd_kafka_DeleteGroups_result_t *res = rd_kafka_event_DeleteGroups_result(ev);
            size_t n = 0;
            const rd_kafka_group_result_t **gr = res ? rd_kafka_DeleteGroups_result_groups(res, &n) : NULL;
            if (!e && n == 1 && rd_kafka_group_result_error(gr[0]))
                e = rd_kafka_error_code(rd_kafka_group_result_error(gr[0]));
            rd_kafka_event_destroy(ev);
        }
        rd_kafka_DeleteGroup_destroy(g);
        rd_kafka_AdminOptions_destroy(o);
        rd_kafka_queue_destroy(q);
        if (e == RD_KAFKA_RESP_ERR_NO_ERROR || e == RD_KAFKA_RESP_ERR_GROUP_ID_NOT_FOUND)
            return 0;
        util_sleep_ms(500);
    } while (util_mono_ms() < end);
    fprintf(stderr, "# consumer group %s not deleted: %s\n", group, rd_kafka_err2str(e));
    return -1;
}

/* --- PostgreSQL and Redis without cmocka (teardown too) ------------------------ */

static long rows_of(const struct run *r)
{
    char err[256], p[24];
    PGconn *pg = NULL;
    long v = -1;
    if (pgconn_open_as(&r->c, CFG_ROLE_ADMIN, "seckill-tests", &pg, err, sizeof(err)) != 0)
        return -1;
    snprintf(p, sizeof(p), "%" PRId64, r->item);
    const char *params[] = { p };
    PGresult *res = PQexecParams(pg, "SELECT count(*) FROM orders WHERE item_id = $1", 1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
        v = strtol(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    PQfinish(pg);
    return v;
}

/* --- daemons ----------------------------------------------------------------------- */

static void dmn_spawn(struct dmn *d)
{
    char bin[512], inst[16];
    harness_bin(d->bin, bin, sizeof(bin));
    snprintf(inst, sizeof(inst), "%d", d->instance);
    snprintf(d->log, sizeof(d->log), "%.100s.%s.%d.log", d->cfg, d->bin, d->instance < 0 ? d->port : d->instance);
    char *argv[] = { bin, "-c", (char *)d->cfg, d->instance >= 0 ? "-i" : NULL, inst, NULL };
    d->pid = harness_spawn(argv, d->log);
}

/* Has the daemon exited by itself (a zombie waiting to be reaped)? */
static bool dmn_exited(const struct dmn *d)
{
    char path[64], *buf = NULL;
    size_t len;
    bool z = false;
    if (d->pid <= 0)
        return false;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)d->pid);
    if (util_read_file(path, &buf, &len) != 0)
        return true;
    const char *e = strrchr(buf, ')'); /* "pid (comm) S ..." */
    z = e && (e[2] == 'Z' || e[2] == 'X');
    free(buf);
    return z;
}

static void dmn_stop(struct dmn *d)
{
    if (d->pid <= 0)
        return;
    assert_int_equal(kill(d->pid, SIGTERM), 0);
    int st = harness_wait_exit(d->pid, 30000);
    d->pid = 0;
    if (st != 0)
        fail_msg("%s exit status %d after SIGTERM; see %s", d->bin, st, d->log);
}

static void print_logs(struct run *r)
{
    struct dmn *all[PRODUCERS + CONSUMERS];
    int n = 0;
    for (int i = 0; i < PRODUCERS; i++)
        all[n++] = &r->prod[i];
    for (int i = 0; i < CONSUMERS; i++)
        all[n++] = &r->cons[i];
    for (int i = 0; i < n; i++) {
        if (!all[i]->log[0])
            continue;
        fprintf(stderr, "# ---- last lines of %s\n", all[i]->log);
        fflush(stderr);
        harness_sh("tail -n 15 '%s' | sed 's/^/#   /' >&2", all[i]->log);
    }
}

/* seckillctl with the consumers' configuration: its exit status, its output
 * in *out (caller frees). */
static int ctl(struct run *r, char **out, const char *const *args)
{
    char bin[512], path[200];
    char *argv[16] = { bin, "-c", r->cfg[0] };
    int n = 3;
    size_t len;
    harness_bin("seckillctl", bin, sizeof(bin));
    for (; *args && n < 15; args++)
        argv[n++] = (char *)*args;
    argv[n] = NULL;
    snprintf(path, sizeof(path), "%.120s.ctl.out", r->cfg[0]);
    unlink(path);
    int st = harness_wait_exit(harness_spawn(argv, path), 120000);
    *out = NULL;
    if (util_read_file(path, out, &len) != 0)
        *out = strdup("");
    unlink(path);
    assert_non_null(*out);
    return st;
}

/* --- the run ------------------------------------------------------------------------ */

static void run_init(struct run *r)
{
    char rnd[9], v[16];
    memset(r, 0, sizeof(*r));
    r->t0 = util_mono_ms();
    harness_cfg(&r->c); /* a Redis key prefix of its own */
    assert_int_equal(util_random_hex(rnd, 4), 0);
    snprintf(r->topic, sizeof(r->topic), "sktest.scaleout.%d.%s", (int)getpid(), rnd);
    snprintf(r->dlq, sizeof(r->dlq), "%s.dlq", r->topic);
    snprintf(r->group, sizeof(r->group), "sktest-scaleout-%d-%s", (int)getpid(), rnd);
    snprintf(r->instance_id, sizeof(r->instance_id), "sktest-scaleout-%s", rnd);
    r->item = 930000000000LL + (int64_t)util_rand_below(69999999999ULL);
    r->user_base = 600000000000LL + (int64_t)util_rand_below(90000000000ULL);

    struct cfg *c = &r->c;
    harness_set_str(&c->kafka.brokers, CLUSTER);
    harness_set_str(&c->kafka.topic, r->topic);
    harness_set_str(&c->kafka.dlq_topic, r->dlq);
    harness_set_str(&c->consumer.group_id, r->group);
    harness_set_str(&c->consumer.instance_id, r->instance_id);
    c->producer.max_inflight = 20000;
    c->producer.connection_timeout_s = 30;
    c->producer.sweep_age_ms = 1000; /* raised by the producer to 2 x message.timeout.ms + 2 s */
    c->producer.sweep_interval_ms = 500;
    c->producer.drain_timeout_ms = 20000;
    c->producer.auth = CFG_AUTH_JWT; /* buyers present tokens, as in production */
    c->consumer.workers = 2;
    c->consumer.batch_size = 50;
    c->consumer.batch_linger_ms = 5;
    c->consumer.drain_timeout_ms = 10000;
    c->lock.ttl_ms = LOCK_TTL_MS;
    snprintf(v, sizeof(v), "%d", MSG_TIMEOUT_MS);
    harness_props_set(&c->kafka.producer_properties, "message.timeout.ms", v);
    snprintf(v, sizeof(v), "%d", SESSION_TIMEOUT_MS);
    harness_props_set(&c->kafka.consumer_properties, "session.timeout.ms", v);
    harness_props_set(&c->kafka.consumer_properties, "heartbeat.interval.ms", "1000");

    /* Ports: two per producer (buyers, operators); the consumers' metrics
     * on base + N. */
    for (int i = 0; i < PRODUCERS; i++) {
        int p[2];
        harness_free_ports(2, p); /* never a port it gave out lately */
        r->prod_ports[i] = p[0];
        r->prod_mports[i] = p[1];
    }
    int base = 0;
    for (int tries = 0; tries < 100 && !base; tries++) {
        int p = harness_free_port();
        bool ok = true;
        for (int i = 0; i < CONSUMERS && ok; i++)
            ok = port_free(p + i) && !port_taken(r, p + i, PRODUCERS);
        if (ok)
            base = p;
    }
    assert_true(base > 0);
    c->consumer.metrics_port = base;

    /* One file per producer (its port); the first is the consumers' too. */
    for (int i = 0; i < PRODUCERS; i++) {
        c->producer.port = r->prod_ports[i];
        c->producer.metrics_port = r->prod_mports[i];
        harness_cfg_file(c, r->cfg[i], sizeof(r->cfg[i]));
        r->prod[i] = (struct dmn){ .bin = "seckill-producer", .cfg = r->cfg[i], .port = r->prod_ports[i],
                                   .mport = r->prod_mports[i], .instance = -1 };
    }
    for (int i = 0; i < CONSUMERS; i++)
        r->cons[i] = (struct dmn){ .bin = "seckill-consumer", .cfg = r->cfg[0], .port = base + i,
                                   .mport = base + i, .instance = i };
}

static void run_start(struct run *r)
{
    char id[24], stock[24], *out = NULL;
    bool ok;
    topic_make(r->topic, PARTS);
    r->topic_made = true;
    topic_make(r->dlq, 1);
    r->dlq_made = true;

    snprintf(id, sizeof(id), "%" PRId64, r->item);
    snprintf(stock, sizeof(stock), "%d", STOCK);
    const char *args[] = { "item", "create", "--id", id, "--stock", stock, NULL };
    int st = ctl(r, &out, args);
    if (st != 0)
        fail_msg("item create exited %d: %s", st, out);
    free(out);

    for (int i = 0; i < PRODUCERS; i++)
        dmn_spawn(&r->prod[i]);
    for (int i = 0; i < CONSUMERS; i++)
        dmn_spawn(&r->cons[i]);
    for (int i = 0; i < PRODUCERS; i++) {
        WAIT_UNTIL(healthz(r->prod[i].port) == 200, START_MS, ok);
        if (!ok)
            fail_msg("producer %d (port %d) not healthy; see %s", i, r->prod[i].port, r->prod[i].log);
    }
    /* Every consumer holds partitions, and the group holds all of them. */
    WAIT_UNTIL(assigned(&r->cons[0]) >= 1 && assigned(&r->cons[1]) >= 1 && assigned(&r->cons[2]) >= 1 &&
                   assigned(&r->cons[0]) + assigned(&r->cons[1]) + assigned(&r->cons[2]) == PARTS,
               START_MS, ok);
    if (!ok)
        fail_msg("the group did not spread %d partitions over %d consumers: %" PRId64 "/%" PRId64 "/%" PRId64,
                 PARTS, CONSUMERS, assigned(&r->cons[0]), assigned(&r->cons[1]), assigned(&r->cons[2]));
}

/* The node leading most of the topic's partitions (the lowest id on a tie). */
static int busiest_leader(const struct run *r, int led[BROKERS + 1])
{
    int best = 0;
    if (!leaders(r->topic, PARTS, led))
        fail_msg("topic %s: metadata incomplete before the broker kill", r->topic);
    for (int n = 1; n <= BROKERS; n++)
        if (!best || led[n] > led[best])
            best = n;
    return best;
}

/* The node coordinating the consumer group (the broker that answers for it
 * in ListGroups); 0 if unknown. */
static int group_coordinator(const char *group)
{
    const struct rd_kafka_group_list *gl = NULL;
    int node = 0;
    if (rd_kafka_list_groups(meta, group, &gl, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR && gl) {
        for (int i = 0; i < gl->group_cnt && !node; i++)
            if (strcmp(gl->groups[i].group, group) == 0 && gl->groups[i].err == 0)
                node = gl->groups[i].broker.id;
    }
    if (gl)
        rd_kafka_group_list_destroy(gl);
    return node >= 1 && node <= BROKERS ? node : 0;
}

/* The active controller (KRaft quorum leader), from the nodes' quorum-state
 * files: the leader of the highest epoch any node recorded; 0 if unknown.
 * librdkafka 2.0.2 does not expose the controller id. */
static int active_controller(void)
{
    const char *dir = getenv("SECKILL_STACK_DIR");
    char path[600], *buf;
    size_t len;
    long best_epoch = -1;
    int leader = 0;
    for (int n = 1; n <= BROKERS; n++) {
        if (dir)
            snprintf(path, sizeof(path), "%s/kafka3/node%d/data/__cluster_metadata-0/quorum-state", dir, n);
        else
            snprintf(path, sizeof(path), "%s/.stack/kafka3/node%d/data/__cluster_metadata-0/quorum-state",
                     harness_root(), n);
        if (util_read_file(path, &buf, &len) != 0)
            continue;
        const char *l = strstr(buf, "\"leaderId\":"), *e = strstr(buf, "\"leaderEpoch\":");
        if (l && e) {
            long id = strtol(l + 11, NULL, 10), epoch = strtol(e + 14, NULL, 10);
            if (epoch > best_epoch && id >= 1 && id <= BROKERS) {
                best_epoch = epoch;
                leader = (int)id;
            }
        }
        free(buf);
    }
    return leader;
}

/* A daemon that exited by itself (a fatal librdkafka error exits 1) is
 * started again, as systemd's Restart=on-failure would; the consumer killed
 * on purpose stays dead. */
static void survivors_restart(struct run *r)
{
    for (int i = 0; i < PRODUCERS + CONSUMERS; i++) {
        bool prod = i < PRODUCERS;
        int n = prod ? i : i - PRODUCERS;
        struct dmn *d = prod ? &r->prod[n] : &r->cons[n];
        if ((!prod && n == KILLED_CONSUMER) || !dmn_exited(d))
            continue;
        int st = harness_wait_exit(d->pid, 5000);
        d->pid = 0;
        printf("# %s %d exited by itself with status %d; started again (Restart=on-failure)\n",
               prod ? "producer" : "consumer", n, st);
        if (st == 0)
            fail_msg("%s %d exited 0 without being asked to stop; see %s", d->bin, n, d->log);
        dmn_spawn(d);
        d->respawns++;
        if (prod)
            r->prod_restarts++;
        else
            r->restarts++;
    }
}

/* Producer i's accepted count, read once its /metrics answers: -1 if it
 * never did. A producer ending on a fatal librdkafka error closes its
 * listeners before it has flushed and exited; once it has exited it is
 * started again (its respawns count moves), and its count starts over. */
static int64_t prod_accepted(struct run *r, int i)
{
    int before = r->prod[i].respawns;
    int64_t v = -1;
    bool ok;
    WAIT_UNTIL((survivors_restart(r), r->prod[i].respawns != before ||
                (v = sale_metric(r->prod[i].mport, "seckill_producer_requests_total{outcome=\"accepted\"}")) >= 0),
               START_MS, ok);
    (void)ok; /* (v says it: -1 when it never answered) */
    return r->prod[i].respawns != before ? -1 : v;
}

/* Did a surviving consumer log a fatal librdkafka error? Says which. */
static bool survivor_fatal(struct run *r)
{
    bool any = false;
    for (int i = 0; i < CONSUMERS; i++)
        if (i != KILLED_CONSUMER && harness_file_has(r->cons[i].log, "Fatal error")) {
            printf("# consumer %d logged a fatal librdkafka error (see %s)\n", i, r->cons[i].log);
            any = true;
        }
    return any;
}

/* Every surviving instance is a working member again: the group spread all
 * partitions over them. An instance alive but without partitions has left
 * the group without telling anyone. */
static bool survivors_share(struct run *r)
{
    int64_t sum = 0;
    survivors_restart(r);
    for (int i = 0; i < CONSUMERS; i++) {
        if (i == KILLED_CONSUMER)
            continue;
        int64_t a = assigned(&r->cons[i]);
        if (a < 1)
            return false;
        sum += a;
    }
    return sum == PARTS;
}

static void test_scaleout(void **state)
{
    (void)state;
    struct run *r = &run;
    struct sale_counts sc;
    struct sale_report rep;
    char why[512], id[24], *out;
    int led[BROKERS + 1];
    bool ok;

    run_init(r);
    run_start(r);
    int64_t t_ready = util_mono_ms();

    int64_t hammer_user = r->user_base + HAMMER_USER_OFFSET;
    struct sale_params p = {
        .ports = r->prod_ports, .nports = PRODUCERS, .item_id = r->item, .user_base = r->user_base,
        .users = USERS, .requests = REQUESTS, .conns = CONNS, .rate = RATE,
        .hammer_user = hammer_user, .hammer = HAMMER, .timeout_ms = REQUEST_TIMEOUT_MS,
        .keys = harness_keys(&r->c),
    };
    assert_int_equal(sale_start(&p, &r->sale), 0);
    int64_t t_sale = util_mono_ms();
    const long total = REQUESTS + HAMMER;

    /* Fault 1: a consumer instance, while its partitions carry orders. */
    WAIT_UNTIL(sale_hammer_done(r->sale) && sale_accepted(r->sale) >= CONSUMER_KILL_AT, 30000, ok);
    if (!ok)
        fail_msg("the sale did not get going: %ld accepted", sale_accepted(r->sale));
    struct dmn *victim = &r->cons[KILLED_CONSUMER];
    int64_t victim_parts = assigned(victim);
    long rows_at_ckill = rows_of(r);
    assert_int_equal(kill(victim->pid, SIGKILL), 0);
    assert_int_equal(harness_wait_exit(victim->pid, 10000), 128 + SIGKILL);
    victim->pid = 0;
    int64_t t_ckill = util_mono_ms();
    long acc_at_ckill = sale_accepted(r->sale);

    /* Fault 2: a broker, mid-sale too. */
    WAIT_UNTIL(sale_accepted(r->sale) >= BROKER_KILL_AT, 30000, ok);
    assert_true(ok);
    /* The node coordinating the consumer group: the consumers lose their
     * coordinator and the producers the leaders of its partitions at once
     * (with RF 3 on three nodes it also holds a replica of every partition,
     * so every acks=all write waits until the controller fences it). Else
     * the active controller, else the leader of most partitions. */
    int busiest = busiest_leader(r, led), controller = active_controller(), coordinator = group_coordinator(r->group);
    int node = coordinator ? coordinator : controller ? controller : busiest;
    int64_t t_bkill = util_mono_ms();
    long acc_at_bkill = sale_accepted(r->sale);
    if (stack("kill kafka3-%d", node) != 0)
        fail_msg("scripts/stack kill kafka3-%d failed", node);
    r->killed_broker = node;
    printf("# consumer %d (%" PRId64 " partitions) SIGKILLed at %ld accepted, %ld persisted, %.2f s into the "
           "sale; broker kafka3-%d (%s, %s, leader of %d/%d partitions) SIGKILLed at %ld accepted, %.2f s into "
           "the sale (scripts/stack kill took %.2f s)\n",
           KILLED_CONSUMER, victim_parts, acc_at_ckill, rows_at_ckill, secs(t_ckill - t_sale), node,
           node == coordinator ? "the group's coordinator" : "coordinator unknown",
           node == controller ? "the active controller" : controller ? "not the controller" : "controller unknown",
           led[node], PARTS, acc_at_bkill, secs(t_bkill - t_sale), secs(util_mono_ms() - t_bkill));
    assert_true(acc_at_bkill < STOCK); /* really mid-sale */

    /* The sale goes on. Watch it: the longest wait between two 202s, and
     * when the survivors own every partition. */
    long last = sale_accepted(r->sale);
    int64_t t_last = util_mono_ms(), max_gap = 0, t_takeover = 0, t_gap_end = 0;
    int64_t unhealthy_ms = 0, t_poll = util_mono_ms(), t_answered = 0;
    while (sale_answered(r->sale) < total || (!t_takeover && util_mono_ms() - t_ckill <= TAKEOVER_MS)) {
        int64_t now = util_mono_ms();
        /* What a load balancer would see of the producers meanwhile. */
        if (healthz(r->prod[0].port) != 200)
            unhealthy_ms += now - t_poll;
        t_poll = now;
        long a = sale_accepted(r->sale);
        if (a != last) {
            if (now - t_last > max_gap) {
                max_gap = now - t_last;
                t_gap_end = now;
            }
            last = a;
            t_last = now;
        }
        if (!t_answered && sale_answered(r->sale) >= total)
            t_answered = now;
        survivors_restart(r);
        if (!t_takeover) {
            int64_t sum = 0;
            for (int i = 0; i < CONSUMERS; i++)
                if (i != KILLED_CONSUMER)
                    sum += assigned(&r->cons[i]);
            if (sum == PARTS)
                t_takeover = now;
        }
        if (now - t_sale > SALE_MAX_MS)
            fail_msg("the sale has %ld of %ld answers after %d s", sale_answered(r->sale), total,
                     SALE_MAX_MS / 1000);
        util_sleep_ms(50);
    }
    sale_wait(r->sale);
    int64_t t_sale_end = t_answered ? t_answered : util_mono_ms();
    sale_count(r->sale, &sc);
    printf("# sale: %ld requests in %.1f s: %ld accepted (%ld after the broker kill), %ld duplicate, %ld sold out, "
           "%ld unavailable, %ld overloaded, %ld unanswered, %ld not sent, %ld other; hammer %ld accepted\n",
           total, secs(t_sale_end - t_sale), sc.accepted, sc.accepted - acc_at_bkill, sc.duplicate, sc.sold_out,
           sc.unavailable, sc.overloaded, sc.no_answer, sc.not_sent, sc.other, sc.hammer_accepted);
    char took[64] = "never";
    if (t_takeover)
        snprintf(took, sizeof(took), "%.2f s after the consumer kill", secs(t_takeover - t_ckill));
    printf("# longest wait between two 202s: %.2f s (ended %.2f s after the broker kill); survivors took over "
           "all %d partitions: %s; producer 0's /healthz not 200 for %.1f s\n",
           secs(max_gap), secs(t_gap_end - t_bkill), PARTS, took, secs(unhealthy_ms));
    if (!t_takeover) {
        int64_t sum = 0;
        for (int i = 0; i < CONSUMERS; i++)
            if (i != KILLED_CONSUMER)
                sum += assigned(&r->cons[i]);
        printf("# orders in PostgreSQL: %ld of %ld accepted\n", rows_of(r), sc.accepted);
        fail_msg("the surviving consumers hold %" PRId64 " of %d partitions %d s after the kill%s", sum, PARTS,
                 TAKEOVER_MS / 1000,
                 survivor_fatal(r) ? ": alive, out of the group after a fatal librdkafka error they did not act "
                                     "on (see their logs)"
                                   : "");
    }
    /* Both producers served, and units were sold after both faults. */
    for (int i = 0; i < PRODUCERS; i++) {
        int64_t v = prod_accepted(r, i);
        printf("# producer %d (port %d): %" PRId64 " accepted, kafka errors: not persisted %" PRId64
               ", possibly persisted %" PRId64 ", queue full %" PRId64 "; restored %" PRId64 ", ambiguous %" PRId64
               ", swept %" PRId64 "\n",
               i, r->prod[i].port, v,
               sale_metric(r->prod[i].mport, "seckill_producer_kafka_errors_total{kind=\"not_persisted\"}"),
               sale_metric(r->prod[i].mport, "seckill_producer_kafka_errors_total{kind=\"possibly_persisted\"}"),
               sale_metric(r->prod[i].mport, "seckill_producer_kafka_errors_total{kind=\"queue_full\"}"),
               sale_metric(r->prod[i].mport, "seckill_producer_restored_total"),
               sale_metric(r->prod[i].mport, "seckill_producer_ambiguous_total"),
               sale_metric(r->prod[i].mport, "seckill_producer_swept_total"));
        if (r->prod[i].respawns) /* (a restarted one counts from its restart) */
            continue;
        if (v < 0)
            fail_msg("producer %d (pid %d): its /metrics on port %d did not answer for %d s; see %s", i,
                     (int)r->prod[i].pid, r->prod[i].mport, START_MS / 1000, r->prod[i].log);
        if (v == 0)
            fail_msg("producer %d (port %d) accepted no buy in the whole sale; see %s", i, r->prod[i].port,
                     r->prod[i].log);
    }
    assert_true(sc.accepted > acc_at_bkill);

    /* Drained, with two of three brokers. */
    if (sale_settle(&r->c, r->item, &r->sale, 1, SETTLE_MS, why, sizeof(why)) != 0)
        fail_msg("%s", why);
    int64_t t_settled = util_mono_ms();
    if (sale_verify(&r->c, r->item, &r->sale, 1, hammer_user, &rep, why, sizeof(why)) != 0)
        fail_msg("%s", why);
    sale_report_print(stdout, "#   ", &rep);
    printf("# surviving consumers: persisted %" PRId64 ", already persisted (redelivered) %" PRId64
           ", stale fences %" PRId64 ", lock busy %" PRId64 ", lock timeouts %" PRId64 "\n",
           metric_sum(r->cons, CONSUMERS, "seckill_consumer_persisted_total"),
           metric_sum(r->cons, CONSUMERS, "seckill_consumer_duplicates_skipped_total"),
           metric_sum(r->cons, CONSUMERS, "seckill_consumer_stale_fence_total"),
           metric_sum(r->cons, CONSUMERS, "seckill_consumer_lock_busy_total"),
           metric_sum(r->cons, CONSUMERS, "seckill_consumer_lock_timeouts_total"));
    assert_int_equal(rep.lost, 0);
    assert_int_equal(rep.unexplained, 0);
    assert_int_equal(rep.duplicates, 0);
    assert_int_equal(rep.oversold, 0);
    assert_int_equal(rep.stock_total, STOCK);
    assert_int_equal(rep.orders, STOCK); /* demand exceeds the stock: everything sells */
    assert_int_equal(rep.stock_left, 0);
    assert_int_equal(rep.redis_stock, 0);
    assert_int_equal(rep.redis_pending, 0);
    assert_int_equal(rep.redis_unpub, 0);
    assert_int_equal(rep.redis_buyers, STOCK);
    assert_int_equal(rep.rejections, 0);
    assert_int_equal(rep.other_status, 0);
    assert_int_equal(rep.unknown_item, 0);
    /* The hammering user: at most one 202 and at most one order (none only
     * if all of its requests were refused: the hammer runs before the
     * faults, but the stack's Redis may be restarted by other tests). */
    assert_true(rep.hammer_accepted <= 1);
    assert_true(rep.hammer_orders <= 1);
    assert_true(rep.hammer_orders >= rep.hammer_accepted);
    int64_t dead = -1;
    WAIT_UNTIL((dead = topic_end(r->dlq, 1)) >= 0, 30000, ok);
    if (!ok)
        fail_msg("the end offset of %s is not known after 30 s", r->dlq);
    assert_int_equal(dead, 0); /* nothing dead-lettered, by any instance */
    bool fatal = survivor_fatal(r);
    WAIT_UNTIL(survivors_share(r), TAKEOVER_MS, ok);
    if (!ok) {
        char parts[128] = "";
        for (int i = 0; i < CONSUMERS; i++)
            if (i != KILLED_CONSUMER)
                snprintf(parts + strlen(parts), sizeof(parts) - strlen(parts), " %d:%" PRId64, i,
                         assigned(&r->cons[i]));
        fail_msg("the surviving consumers do not share the %d partitions (instance:partitions%s); an instance "
                 "alive without partitions has dropped out of the group%s",
                 PARTS, parts,
                 fatal ? " after a fatal librdkafka error it did not act on (see its log)" : "");
    }

    snprintf(id, sizeof(id), "%" PRId64, r->item);
    const char *rec[] = { "reconcile", "--item", id, NULL };
    int st = ctl(r, &out, rec);
    if (st != 0) {
        fprintf(stderr, "# reconcile (2 of 3 brokers) said:\n%s", out);
        free(out);
        fail_msg("seckillctl reconcile --item %s exited %d with kafka3-%d down", id, st, node);
    }
    free(out);

    /* The broker comes back and rejoins every ISR (start waits for it);
     * the pipeline is still healthy and still reconciles. */
    int64_t t_restart = util_mono_ms();
    if (stack("start kafka3-%d", node) != 0)
        fail_msg("scripts/stack start kafka3-%d failed", node);
    r->broker_back = true;
    int64_t t_back = util_mono_ms();
    WAIT_UNTIL((survivors_restart(r), healthz(r->prod[0].port) == 200 && healthz(r->prod[1].port) == 200), 30000,
               ok);
    if (!ok)
        fail_msg("the producers are not both healthy 30 s after kafka3-%d came back: /healthz %d and %d", node,
                 healthz(r->prod[0].port), healthz(r->prod[1].port));
    assert_true(leaders(r->topic, PARTS, led));
    st = ctl(r, &out, rec);
    if (st != 0) {
        fprintf(stderr, "# reconcile (3 brokers) said:\n%s", out);
        free(out);
        fail_msg("seckillctl reconcile --item %s exited %d after kafka3-%d came back", id, st, node);
    }
    free(out);
    printf("# kafka3-%d back in every ISR %.1f s after its start; reconcile clean with 2 and with 3 brokers\n", node,
           secs(t_back - t_restart));

    for (int i = 0; i < PRODUCERS; i++)
        dmn_stop(&r->prod[i]);
    for (int i = 0; i < CONSUMERS; i++)
        dmn_stop(&r->cons[i]);
    r->passed = true;
    char restarted[64] = "", prestarted[64] = "";
    if (r->restarts)
        snprintf(restarted, sizeof(restarted), ", %d restarted after exiting", r->restarts);
    if (r->prod_restarts)
        snprintf(prestarted, sizeof(prestarted), " (%d restarted after exiting)", r->prod_restarts);
    printf("# scale-out: brokers %d (1 killed), producers %d%s, consumers %d (1 killed%s), accepted %ld, "
           "orders %ld, oversold %ld, lost %ld, duplicates %ld, %.0fs\n",
           BROKERS, PRODUCERS, prestarted, CONSUMERS, restarted, rep.accepted, rep.orders, rep.oversold, rep.lost,
           rep.duplicates, secs(util_mono_ms() - r->t0));
    printf("# phases: set-up %.1f s, sale %.1f s, drained %.1f s after the last answer, broker restart %.1f s\n",
           secs(t_ready - r->t0), secs(t_sale_end - t_sale), secs(t_settled - t_sale_end), secs(t_back - t_restart));
}

/* Whatever happened: daemons gone, the run's topics, group, rows and keys
 * removed. (The cluster itself goes in the group teardown.) */
static int run_teardown(void **state)
{
    (void)state;
    struct run *r = &run;
    int64_t t = util_mono_ms();
    if (r->sale) {
        sale_stop(r->sale);
        sale_free(r->sale);
        r->sale = NULL;
    }
    if (!r->passed)
        print_logs(r);
    if (r->killed_broker && !r->broker_back)
        printf("# kafka3-%d left down (the cluster stops at the end)\n", r->killed_broker);
    struct dmn *all[PRODUCERS + CONSUMERS];
    int n = 0;
    for (int i = 0; i < PRODUCERS; i++)
        all[n++] = &r->prod[i];
    for (int i = 0; i < CONSUMERS; i++)
        all[n++] = &r->cons[i];
    for (int i = 0; i < n; i++)
        if (all[i]->pid > 0) {
            kill(all[i]->pid, SIGKILL);
            harness_wait_exit(all[i]->pid, 10000);
            all[i]->pid = 0;
        }
    if (r->topic_made)
        stack("topic --brokers 3 delete '%s'", r->topic);
    if (r->dlq_made)
        stack("topic --brokers 3 delete '%s'", r->dlq);
    if (r->group[0])
        group_delete(r->group, GROUP_DELETE_MS);
    if (r->item) {
        harness_pg_try(&r->c, "DELETE FROM orders WHERE item_id = $1", r->item, 0);
        harness_pg_try(&r->c, "DELETE FROM order_rejections WHERE item_id = $1", r->item, 0);
        harness_pg_try(&r->c, "DELETE FROM items WHERE item_id = $1", r->item, 0);
        harness_pg_try(&r->c, "DELETE FROM user_fences WHERE user_id >= $1 AND user_id < $2", r->user_base,
                 r->user_base + USER_SPAN);
        harness_redis_drop(&r->c);
    }
    if (!getenv("SECKILL_TEST_KEEP_LOGS")) {
        for (int i = 0; i < PRODUCERS; i++)
            if (r->cfg[i][0])
                unlink(r->cfg[i]);
        for (int i = 0; i < n; i++)
            if (all[i]->log[0])
                unlink(all[i]->log);
    } else {
        printf("# logs kept: %s.*.log, %s.*.log\n", r->cfg[0], r->cfg[1]);
    }
    if (r->c.kafka.brokers)
        cfg_free(&r->c);
    printf("# clean-up %.1f s\n", secs(util_mono_ms() - t));
    return 0;
}

/* --- the cluster: up for the group, down after it, whatever happened -------------- */

static int setup(void **state)
{
    char err[512];
    int64_t t = util_mono_ms();
    harness_setup(state);
    if (stack("up --brokers 3") != 0) {
        stack("down --brokers 3");
        return -1;
    }
    printf("# scripts/stack up --brokers 3: %.1f s\n", secs(util_mono_ms() - t));
    rd_kafka_conf_t *conf = harness_kafka_conf(&harness_conf, "admin");
    if (rd_kafka_conf_set(conf, "bootstrap.servers", CLUSTER, err, sizeof(err)) != RD_KAFKA_CONF_OK ||
        rd_kafka_conf_set(conf, "log_level", "0", err, sizeof(err)) != RD_KAFKA_CONF_OK) {
        rd_kafka_conf_destroy(conf);
        stack("down --brokers 3");
        return -1;
    }
    meta = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (!meta) {
        stack("down --brokers 3");
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    int64_t t = util_mono_ms();
    if (meta)
        rd_kafka_destroy(meta);
    meta = NULL;
    int st = stack("down --brokers 3");
    printf("# scripts/stack down --brokers 3: %.1f s%s\n", secs(util_mono_ms() - t), st ? " (FAILED)" : "");
    return harness_teardown(state) || st != 0 ? -1 : 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_scaleout, run_teardown),
    };
    setvbuf(stdout, NULL, _IOLBF, 0);
    return cmocka_run_group_tests_name("scaleout", tests, setup, teardown);
}
