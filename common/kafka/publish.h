/* publish: the Kafka producer both the request path and the sweeper use.
 *
 * Idempotent (acks=all, no duplicates or reordering on retries), keyed by
 * user id. Every message carries a ticket; its done() runs on the poll
 * thread with the delivery report, and must only hand the result over to
 * its owner (a queue and a signal), never block. */
#ifndef SECKILL_PUBLISH_H
#define SECKILL_PUBLISH_H

#include <librdkafka/rdkafka.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "cfg.h"

struct pub_ticket {
    void (*done)(struct pub_ticket *t, rd_kafka_resp_err_t err, rd_kafka_msg_status_t status);
};

struct pub;

/* The delivery timeout unless kafka.producer_properties sets message.timeout.ms:
 * how long a buyer may wait for an answer while the broker is away. */
#define PUB_DEFAULT_TIMEOUT_MS 5000

/* How long a command (seckillctl sweep, reconcile) waits at its end for
 * what it published to be acknowledged; the sweep pass already waited for
 * each, so this only bounds the flush of a broker gone meanwhile. */
#define PUB_CLOSE_TIMEOUT_MS 5000

/* Create the producer and its poll thread. 0, or -1 with err set. */
int pub_open(const struct cfg *c, struct pub **out, char *err, size_t errlen);
/* Flush for up to timeout_ms, purge what is left (its tickets get their
 * reports), stop the poll thread and destroy. */
void pub_close(struct pub *p, int timeout_ms);

/* Queue a message. 0, or the librdkafka error (RD_KAFKA_RESP_ERR__QUEUE_FULL
 * when the local queue is full: the caller rejects instead of blocking). The
 * ticket's done() runs only when 0 was returned. */
rd_kafka_resp_err_t pub_send(struct pub *p, int64_t user_id, const char *msg, size_t len,
                             struct pub_ticket *t);

/* Purge messages not yet sent (their reports say NOT_PERSISTED); with
 * inflight also those sent without an answer (POSSIBLY_PERSISTED). */
void pub_purge(struct pub *p, int inflight);

/* 1 when broker metadata answered within timeout_ms. Blocks: housekeeping only. */
int pub_ping(struct pub *p, int timeout_ms);

/* Set once librdkafka reported a fatal error: the producer cannot continue
 * and the daemon must shut down (systemd restarts it). */
int pub_fatal(struct pub *p);

/* message.timeout.ms in effect. */
int pub_timeout_ms(const struct pub *p);

#endif
