/* harness: what the C tests share. Tests use cmocka and print TAP
 * (tests/run sets CMOCKA_MESSAGE_OUTPUT=TAP and adds up the results). */
#ifndef SECKILL_HARNESS_H
#define SECKILL_HARNESS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>

#include "cfg.h"
#include "jwt.h"
#include "rpipe.h"
#include "util.h"

/* Wait for a condition with a deadline, polling every 10 ms; sets ok. Never
 * a fixed sleep: the test moves on as soon as the condition holds. */
#define WAIT_UNTIL(cond, timeout_ms, ok)                                 \
    do {                                                                 \
        int64_t wait_end_ = util_mono_ms() + (timeout_ms);               \
        (ok) = false;                                                    \
        for (;;) {                                                       \
            if (cond) {                                                  \
                (ok) = true;                                             \
                break;                                                   \
            }                                                            \
            if (util_mono_ms() >= wait_end_)                             \
                break;                                                   \
            util_sleep_ms(10);                                           \
        }                                                                \
    } while (0)

/* Load the test configuration (SECKILL_TEST_CONFIG, else config/seckill.cfg)
 * with a Redis key prefix of its own, so runs never see each other's keys. */
void harness_cfg(struct cfg *c);
/* A configuration for Kafka clients made and never connected (the unit
 * tests of the consumer's loop, which need no stack): plaintext, brokers at
 * an address nothing listens on, topic as the one read (kafka.topic and
 * kafka.payments_topic) and topic.dlq as the dead letters'. Its strings are
 * literals: nothing to free. */
void harness_cfg_no_broker(struct cfg *c, const char *topic, const char *dlq_topic);

/* The configuration of an integration suite, loaded by harness_setup (a
 * cmocka group setup) and freed by harness_teardown, which also deletes
 * every Redis key under the suite's prefix. */
extern struct cfg harness_conf;
int harness_setup(void **state);
int harness_teardown(void **state);
const char *harness_root(void);
/* The file at rel (a path under the repository) as text, NUL-terminated; the
 * caller frees it. Fails the test when it cannot be read. */
char *harness_slurp(const char *rel);
/* The quoted words of the first "OPEN 'a', 'b', ...)" after `after` in text
 * (a CHECK list of a migration, say), into words[] (pointers into text, the
 * quotes and the closing parenthesis replaced by NULs). How many. */
size_t harness_quoted_list(char *text, const char *after, const char *open, char **words, size_t max);
/* Run only the tests matching SECKILL_TEST_ONLY and skip those matching
 * SECKILL_TEST_SKIP (cmocka's globs: '*', '?'), when set; call before
 * cmocka_run_group_tests. Lets one test of a suite run alone, or a suite run
 * without the tests that stop a shared service. */
void harness_filter(void);

/* A Redis connection for the tests' own fixtures, checks and cleanup: as
 * the dev stack's ACL user stack (every command, every key; its password
 * from $SECKILL_STACK_DIR/secrets/redis-stack, default .stack). The code
 * under test connects as its own role (rconn_open). Fails the test when it
 * cannot connect; harness_redis_open returns -1 with err instead. */
redisContext *harness_redis(const struct cfg *c);
/* The same through the seam (rpipe.h): on the single Redis, or on the
 * Cluster when c has redis.cluster_nodes. */
int harness_rp_open(const struct cfg *c, struct rp **out, char *err, size_t errlen);
/* scripts/stack up --cluster (the plain stack too); on failure its last
 * lines as TAP comments. 0 or -1. */
int harness_cluster_up(void);
int harness_redis_open(const struct cfg *c, redisContext **out, char *err, size_t errlen);
/* The dev stack's state folder ($SECKILL_STACK_DIR, else ROOT/.stack). */
const char *harness_stack_dir(void);
/* A password the stack generated (secret_read of secrets/NAME, NAME being
 * ENGINE-USER: "redis-stack", "kafka-admin", "pg-producer"): 0 and *out
 * (caller frees), or -1 with err. */
struct secret;
int harness_stack_secret(const char *name, struct secret **out, char *err, size_t errlen);
/* Run a command; returns the reply (caller frees). Fails the test on I/O error. */
redisReply *harness_cmd(redisContext *rc, const char *fmt, ...);
/* Integer value of a string/integer reply to fmt, or -1 for nil. */
long long harness_int(redisContext *rc, const char *fmt, ...);
/* Delete every key under c's prefix. */
void harness_redis_cleanup(const struct cfg *c);

/* A librdkafka conf for the tests' own Kafka clients (fixtures, checks):
 * bootstrap c->kafka.brokers, and c's kafka.security_protocol,
 * sasl_mechanism and ssl_ca_file, authenticated as the dev stack's Kafka
 * user `user` ("admin" for fixtures; "producer", "consumer" to prove what
 * those may not do), its password from $SECKILL_STACK_DIR/secrets/kafka-USER.
 * Fails the test when the password cannot be read. The code under test
 * connects through kconf_new as its own role. */
rd_kafka_conf_t *harness_kafka_conf(const struct cfg *c, const char *user);

/* A topic of the tests' own on c's brokers, as Kafka user admin through
 * the Admin API (what scripts/stack topic does with a JVM per call, in a
 * fraction of the time): create makes it with parts partitions and the
 * brokers' default replication (an existing one is an error) and returns
 * once every partition has a leader; delete returns once the topic is gone
 * (so that a run may make it again at once; an absent one is fine). 0, or
 * -1 with the reason printed as a TAP comment. */
int harness_topic_create(const struct cfg *c, const char *name, int parts);
int harness_topic_delete(const struct cfg *c, const char *name);

/* A connection as admin: the tests' own setup, checks and cleanup. */
PGconn *harness_pg(const struct cfg *c);

/* Restart the stack's Redis (SHUTDOWN, then scripts/stack up), wait for PING. */
void harness_redis_restart(void);

/* Lines of the file at path that contain needle (0 if unreadable): a log
 * line said once, or not at all. */
int harness_file_lines(const char *path, const char *needle);
/* The largest count N of the log's "<key>: over (...) after N times" lines
 * (log_repeat_end) that contain needle; -1 when there is none. */
long long harness_over_count(const char *path, const char *needle);
/* Replace the file at path with content and a newline, mode 0600, by a
 * rename (a reader sees the old file or the new one): a password file as
 * the programs demand it. */
void harness_write_secret(const char *path, const char *content);
/* True when the file at path contains needle (false if unreadable). */
bool harness_file_has(const char *path, const char *needle);
/* One statement (as admin) with up to two integer parameters ($2 only when sql names
 * it) on a connection of its own; 0 when it ran, -1 otherwise. No cmocka
 * assertion: usable from teardowns, which must go on after a failure. */
int harness_pg_try(const struct cfg *c, const char *sql, int64_t a1, int64_t a2);
/* Delete every key under c's prefix in one script (so, as one loss, while
 * daemons run). 0, or -1 when Redis could not be reached. No assertion. */
int harness_redis_drop(const struct cfg *c);

/* Replace a config string (free the old one). */
void harness_set_str(char **field, const char *v);
/* Set a raw librdkafka property in p, replacing one of the same name. */
void harness_props_set(struct cfg_props *p, const char *k, const char *v);
/* Run a shell command built from fmt; its exit status (128+N for signal N,
 * -1 if it could not run). */
int harness_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Write c to a fresh file under /tmp (cfg_write); path receives its name.
 * The caller unlinks it. */
void harness_cfg_file(const struct cfg *c, char *path, size_t len);
/* Path of a binary of the build this test belongs to ("seckill-consumer"). */
void harness_bin(const char *name, char *out, size_t len);
/* Start argv[0] with stdout and stderr appended to logpath (NULL: inherit). */
pid_t harness_spawn(char *const argv[], const char *logpath);
/* Wait up to timeout_ms for pid to exit. Returns its exit status, 128+N if a
 * signal N ended it, or -1 on timeout (it is then killed with SIGKILL). */
int harness_wait_exit(pid_t pid, int timeout_ms);
/* Wait up to timeout_ms until pid (a child: harness_spawn) has stopped, every
 * thread of it (after SIGSTOP). kill() returns before that: until the
 * kernel has stopped the last thread, the others still run, and one woken
 * by a reply goes on with it. 0, or -1 when it exited or did not stop. */
int harness_wait_stopped(pid_t pid, int timeout_ms);

/* Run a binary of this build (harness_bin) with args (NULL-terminated, at
 * most 22), stdout and stderr into *out (caller frees); its exit status as
 * harness_wait_exit gives it. */
int harness_run(char **out, const char *bin, const char *const *args, int timeout_ms);

/* A TCP connection to 127.0.0.1:port with 15 s send and receive timeouts,
 * or -1. */
int harness_connect(int port);

/* One HTTP/1.1 request to 127.0.0.1:port on a fresh connection (Connection:
 * close). ctype and body may be NULL. Returns the status code, or -1 when
 * the exchange failed; the response body (truncated) goes into resp. */
int harness_http(int port, const char *method, const char *path, const char *ctype,
                 const char *body, char *resp, size_t resplen);
/* The same with one more request header, hdr: value (hdr NULL: none). */
int harness_http_hdr(int port, const char *method, const char *path, const char *ctype, const char *hdr,
                     const char *value, const char *body, char *resp, size_t resplen);
/* An order as the producer takes it with producer.auth = "none" (the buyer
 * in the body): POST /api/v1/seckill {"user_id":user,"item_id":item}. As
 * harness_http. */
int harness_order(int port, int64_t user, int64_t item, char *resp, size_t resplen);
/* seckillctl -c cfgpath item create --id item --stock stock (as admin), which
 * must succeed within 30 s. Returns item. */
int64_t harness_item_create(const char *cfgpath, int64_t item, int64_t stock);
/* A TCP port on 127.0.0.1 that was free a moment ago. */
int harness_free_port(void);
/* n (at most 8) distinct such ports, asked together: ports asked one at a
 * time may repeat, each being free again once asked. */
void harness_free_ports(int n, int *out);
/* A producer's two ports in c, distinct and free: producer.port (the
 * buyers') and producer.metrics_port (the operators': /metrics). */
void harness_producer_ports(struct cfg *c);

/* The jwt keyset of c (jwt.key_dir, jwt.keys, the checks), loaded once per
 * distinct key configuration and kept until the program exits; fails the
 * test when it cannot be loaded. For producers with producer.auth = "jwt". */
const struct jwt_keyset *harness_keys(const struct cfg *c);
/* A bearer token for user, signed with c's jwt.signing_key, valid for an
 * hour. Fails the test when it does not fit in out. */
void harness_token(const struct cfg *c, int64_t user, char *out, size_t len);

/* A Redis reply parsed from its RESP text ("-ERR Function not found\r\n"),
 * for tests of reply handling without a server (caller frees). */
redisReply *harness_resp(const char *text);

#endif
