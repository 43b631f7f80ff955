/* sale: a flash sale driven the way buyers drive it, for the fault and
 * scale-out tests: paced POSTs over HTTP/1.1 keep-alive connections to one
 * or more producers, every answer recorded, then the invariants checked
 * against PostgreSQL, Redis and the consumer group.
 *
 * Nothing here uses cmocka: the driver's threads must never longjmp, and a
 * test decides itself what a finding means. Functions report with return
 * values and fill in explanations. */
#ifndef SECKILL_SALE_H
#define SECKILL_SALE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cfg.h"

struct jwt_keyset;

/* A request's status besides HTTP codes. */
enum {
    SALE_NOT_SENT = 0,   /* no producer accepted the connection: nothing reached one */
    SALE_NO_ANSWER = -1, /* sent, and the answer was lost (connection broke, timeout) */
};

struct sale_rec {
    int64_t user_id;
    int status;       /* HTTP status, SALE_NOT_SENT or SALE_NO_ANSWER */
    int64_t order_id; /* of a 202, else 0 */
};

struct sale_params {
    const int *ports;     /* producers; connection i starts on ports[i % nports] and fails over */
    int nports;
    int64_t item_id;
    int64_t user_base;    /* request i comes from user user_base + i % users */
    int users;
    int requests;
    int conns;            /* concurrent keep-alive connections, one thread each */
    int rate;             /* requests per second over all connections; 0: as fast as answered */
    int64_t hammer_user;  /* 0: none; else `hammer` requests from this user at once, at the start,
                           * each on a connection of its own */
    int hammer;
    int timeout_ms;       /* per request; 0: 20000 */
    const struct jwt_keyset *keys; /* NULL: no Authorization header (producer.auth = "none"); else
                                    * every POST carries "Bearer <token>" for its user, signed with
                                    * the keyset's signing key, and the body no user_id (the token
                                    * names the buyer); tokens are made once, in sale_start */
};

struct sale;

/* Start the sale's threads; returns 0, or -1 (out of memory, no threads, a
 * token that could not be signed). */
int sale_start(const struct sale_params *p, struct sale **out);
/* No new requests from now on (requests in flight still finish). */
void sale_stop(struct sale *s);
/* Wait for every thread; safe to call twice. */
void sale_wait(struct sale *s);
void sale_free(struct sale *s);

/* Progress, while it runs. */
long sale_answered(struct sale *s); /* requests that have a final status */
long sale_accepted(struct sale *s);
bool sale_hammer_done(struct sale *s);

/* The records (after sale_wait): the paced requests, then the hammer's. */
const struct sale_rec *sale_recs(const struct sale *s, size_t *n);

struct sale_counts {
    long accepted, duplicate, sold_out, unknown_item, unavailable, overloaded, no_answer, not_sent, other;
    long hammer_accepted;
};
void sale_count(const struct sale *s, struct sale_counts *c);

/* Is this status one that may or may not have become an order? A 503 may
 * carry a reservation the producer kept for its sweeper (Kafka said
 * "possibly persisted"), and a lost answer may hide a 202. */
static inline bool sale_ambiguous(int status) { return status == 503 || status == SALE_NO_ANSWER; }

/* --- checking -------------------------------------------------------------- */

/* Wait until the sale has drained through c's pipeline: every 202 of the
 * waves has its order row, Redis holds no unpublished reservation of the
 * item and no pending one whose order is not persisted, and
 * c->consumer.group_id has committed c->kafka.topic to its end (so every
 * clean-up the consumer does after a commit is done). 0 once it holds, -1 at the deadline with what is missing in why. */
int sale_settle(const struct cfg *c, int64_t item, struct sale *const *waves, int nwaves, int timeout_ms,
                char *why, size_t whylen);

struct sale_report {
    long accepted;              /* 202s over the waves */
    long ambiguous;             /* 503s and lost answers */
    long orders;                /* rows in orders for the item */
    long from_ambiguous;        /* rows without a 202, whose user had an ambiguous request */
    long lost;                  /* 202s without their row (or with a row of another user) */
    long unexplained;           /* rows neither a 202 nor an ambiguous request accounts for */
    long duplicates;            /* users with several rows + order ids answered twice */
    long oversold;              /* rows beyond stock_total */
    long stock_total, stock_left; /* items row (-1: none) */
    long redis_stock, redis_pending, redis_unpub, redis_buyers; /* -1: key absent */
    long redis_pending_unpersisted; /* pending entries whose order PostgreSQL lacks */
    long rejections;            /* order_rejections rows for the item */
    long hammer_accepted, hammer_orders;
    long other_status;          /* answers outside 202/409/410/429/503/404/lost/not sent */
    long unknown_item;          /* 404s */
};

/* Compare what the buyers were told with what PostgreSQL and Redis hold.
 * hammer_user 0: none. 0, or -1 when a service could not be asked (why). */
int sale_verify(const struct cfg *c, int64_t item, struct sale *const *waves, int nwaves, int64_t hammer_user,
                struct sale_report *r, char *why, size_t whylen);
void sale_report_print(FILE *f, const char *prefix, const struct sale_report *r);

/* Kafka: the end offsets of topic's partitions and the group's committed
 * ones; true when the group has committed every non-empty partition to
 * its end. */
bool sale_group_caught_up(const struct cfg *c, const char *group, const char *topic);

/* Redis: an ACL user of its own, "sktest-TAG-PID" with a fresh password,
 * holding the rules the stack gives the consumer's user for harness_conf's
 * key prefix (scripts/stack.d/redis.sh, redis_acl_rules): a test's consumer
 * then runs under exactly the production rules, and the test may turn that
 * user off or change it without touching any other daemon. Fails the test
 * on any error. */
void sale_consumer_acl_user(const char *tag, char *user, size_t ulen, char *password, size_t plen);
/* The same for role's user ("producer", "consumer"), whose rules must name
 * must_have (a key the test relies on). */
void sale_acl_user(const char *role, const char *must_have, const char *tag, char *user, size_t ulen,
                   char *password, size_t plen);
/* Turn that user on, or off (its connections killed). */
void sale_acl_user_switch(const char *user, bool on);

/* One GET over a fresh connection; the body (caller frees) or NULL. */
char *sale_http_get(int port, const char *path, int *status);
/* A sample's value from a /metrics page ("name" or "name{labels}"); -1 if
 * the page or the sample is missing. */
int64_t sale_metric(int port, const char *name);

#endif
