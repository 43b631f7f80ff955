/* life: the fixtures of the tests of an order's life after the sale (issue
 * #44: tests/it/test_orderlife.c, test_cancel.c, test_payments.c,
 * test_buyer.c, test_cancelapi.c), written once:
 * - the consumer's Redis ACL user and the seckill_return library
 *   (life_setup, life_teardown: a cmocka group's setup and teardown);
 * - items of the run (life_item_id), each dropped from PostgreSQL with every
 *   row of its orders (life_pg_drop) at the end even when a test failed;
 * - what PostgreSQL and Redis hold (life_pg_int2 and the small readers);
 * - a producer and consumers running as that ACL user on a topic and group
 *   of their own, with an item whose buyers have a payment window
 *   (struct life, life_start, life_stop), optionally with a payments topic
 *   and the Kafka producers a test publishes cancels and payments with;
 * - publishing (life_producer, life_produce, life_payment);
 * - raw HTTP (struct life_resp, life_http_raw and readers of the answer).
 *
 * Everything but raw HTTP fails the running cmocka test on an error; raw
 * HTTP uses no cmocka (threads call it) and reports by return value. */
#ifndef SECKILL_TEST_LIFE_H
#define SECKILL_TEST_LIFE_H

#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bucket.h"
#include "cfg.h"
#include "keys.h"

/* --- fixtures ------------------------------------------------------------------ */

/* Group setup: harness_setup, seckill_return loaded, and an ACL user with
 * the consumer's rules named after name; 0, or -1. */
int life_setup(void **state, const char *name);
/* Group teardown: the ACL user deleted, every item of life_item_id dropped. */
int life_teardown(void **state);
/* seckill_return loaded (or a newer one there); 0, or -1 said on stderr. */
int life_load_return(void);
/* The ACL user's name (life_setup). */
const char *life_user(void);
/* A fresh item id of base + a random part, dropped by life_teardown. */
int64_t life_item_id(int64_t base);

/* --- what the stores hold --------------------------------------------------------- */

/* The first column of the first row of sql with $1 = a1 and $2 = a2 (when
 * the statement has a $2), or -1 for NULL or no row. */
int64_t life_pg_int2(const char *sql, int64_t a1, int64_t a2);
int64_t life_pg_int(const char *sql, int64_t a1);
/* The item's rows and all its orders' (late payments, returns, rejections). */
void life_pg_drop(int64_t item);
int64_t life_orders_in(int64_t item, const char *status);
int64_t life_stock_left(int64_t item);
int64_t life_returns_done(int64_t item);
/* The item's n orders, earliest pay_by first (then by id): each one's id,
 * buyer and pay_by in ms. */
void life_orders_by_pay_by(int64_t item, int n, int64_t *ids, int64_t *users, int64_t *pay_by);
/* A Redis value of the item: GET of its stock, SCARD of a set, HGET of given_back. */
long long life_redis_of(int64_t item, enum keys_item_part part);
/* The same in one of the item's slots (salt: a bucket's, or BUCKET_HOME). */
long long life_redis_at(int64_t item, int salt, enum keys_item_part part);

/* --- a producer and consumers ---------------------------------------------------- */

#define LIFE_MAX_CONS 2

/* What a suite's runs share. */
struct life_opts {
    const char *name;  /* in the topic, group and file names */
    int64_t item_base; /* of life_item_id */
    int64_t user_base; /* the users are user_base + a random multiple of user_span */
    int64_t user_span;
    bool payments; /* a payments topic of the run, and kp and pay */
    int buckets;   /* the item's buckets (seckillctl item create --buckets); 0 or 1: none */
};

struct life {
    struct cfg c;
    char cfgpath[LIFE_MAX_CONS][128], clog[LIFE_MAX_CONS][192], plog[192], pwfile[128];
    int port, cport[LIFE_MAX_CONS];
    pid_t prod, cons[LIFE_MAX_CONS];
    int ncons;
    bool payments;
    int64_t item, user_base;
    rd_kafka_t *kp;  /* with payments: publishes on the orders topic, as admin */
    rd_kafka_t *pay; /* with payments: publishes payments as the shop's payment service */
};

/* The producer and ncons consumers (up to LIFE_MAX_CONS) up, each consumer
 * assigned partitions, and an item of stock units made with seckillctl, its
 * buyers given pay_s seconds to pay; after life_setup. */
void life_start(struct life *l, const struct life_opts *o, int ncons, int64_t stock, int pay_s);
/* Everything stopped (a consumer's exit but 0 fails) and removed. */
void life_stop(struct life *l);
void life_start_consumer(struct life *l, int i);
void life_wait_assigned(struct life *l, int i);
void life_stop_consumer(struct life *l, int i);
/* The running consumers' sum of a metric (each its own counter). */
int64_t life_cons_metric(const struct life *l, const char *name);

/* --- publishing ---------------------------------------------------------------- */

/* An idempotent producer as Kafka user; linger_ms above "0" batches. */
rd_kafka_t *life_producer(const struct cfg *c, const char *user, const char *linger_ms);
/* Publish a copy of val (waiting while the queue is full). */
void life_produce(rd_kafka_t *rk, const char *topic, const char *key, const void *val, size_t len);
/* The shop's payment of order on topic, keyed by its user (consumer/payments.h). */
void life_payment(rd_kafka_t *rk, const char *topic, int64_t order, int64_t user, int64_t paid_at_ms,
                  const char *ref);

/* --- raw HTTP ------------------------------------------------------------------- */

struct life_resp {
    int status;      /* -1: no answer */
    char head[4096]; /* status line and headers, without the blank line */
    char body[8192];
    size_t body_len; /* bytes after the blank line, all of them (may exceed body) */
};

/* Send req as is on fd (closed here; -1: none), read until the server
 * closes (the request says Connection: close, or the server decides to). */
int life_http_on(int fd, const char *req, size_t len, struct life_resp *r);
/* The same on a fresh connection to port. */
int life_http_raw(int port, const char *req, size_t len, struct life_resp *r);
/* The value of header name (case-insensitive), or false. */
bool life_resp_header(const struct life_resp *r, const char *name, char *out, size_t len);
/* "name":"value" of a flat JSON body into out; false when absent. */
bool life_json_str(const char *body, const char *name, char *out, size_t len);

#endif
