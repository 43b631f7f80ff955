/* kloop: one Kafka consumer of the daemon, its offsets and its dead letters,
 * the same way for both of its owners: the orders pipeline (pipeline.h) and
 * the payments thread (payments.h).
 *
 * - Open: a consumer of the group kl_conf.group (kconf: the daemon's Kafka
 *   settings and the owner's defaults; the eager assignor KP_ASSIGNOR;
 *   offsets stored by hand; static membership when consumer.instance_id is
 *   set), and a dead-letter producer (dlq.h) for the one topic it reads.
 *   kl_subscribe then joins the group: apart, so that an owner opens what
 *   it hands its messages to in between, and a failure there leaves the
 *   group alone.
 * - Offsets: the in-flight offsets of each partition (offsets.h); an offset
 *   is stored only once every message below it is done (kl_done,
 *   kl_store), and auto-commit commits only what was stored.
 * - Rebalance: partitions assigned are tracked afresh and assigned (paused
 *   while fetching is); partitions revoked have what is in flight for them
 *   finished (the owner's hook), their offsets stored and committed, then
 *   are forgotten and unassigned; partitions lost are only forgotten (said:
 *   their work is the next owner's). Counted in the owner's gauge.
 * - Pause: kl_pause stops or resumes fetching of the whole assignment, said
 *   once per change; kl_stop_fetching pauses it for good (a stop).
 * - Errors: a fatal one (kconf_fatal) makes kl_fatal true, and the owner
 *   stops for a fresh process; the others librdkafka rides out, said once
 *   per kind. One consumer of the process speaks for the brokers
 *   (kl_conf.brokers: their refusals and outages, the kafka_up gauge and the
 *   lag from librdkafka's statistics); the other says those at debug level,
 *   so that one outage is one line. An error fetched with a message is said
 *   once while it lasts.
 * - Fetch: kl_fetch hands each message fetched (never an error) to the
 *   owner's take hook, which tracks it (kl_track) and keeps it.
 * - Dead letters: kl_letter hands a message to the dead-letter producer (or
 *   keeps it to send again, kl_serve); once the broker has it, it comes back
 *   on the done queue, which kl_drain empties: its offset is done then. The
 *   done queue and the producer may be lent to other threads (the workers
 *   report settled orders on the queue and dead-letter with the producer).
 *
 * The hooks run inside kl_fetch (the rebalance callback runs in the poll),
 * and in kl_close. A kloop belongs to its owner's poll thread: only it calls
 * these functions (kl_fatal: any thread). */
#ifndef SECKILL_KLOOP_H
#define SECKILL_KLOOP_H

#include <librdkafka/rdkafka.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cfg.h"
#include "dlq.h"
#include "queue.h"

struct kloop;

/* What is the owner's; each hook may be NULL but take. arg is theirs. */
struct kl_hooks {
    void *arg;
    /* A message fetched. Returns whether the owner has room for another
     * one now (false ends the kl_fetch). */
    bool (*take)(void *arg, const rd_kafka_message_t *km);
    /* parts are about to be assigned. */
    void (*assigning)(void *arg, const rd_kafka_topic_partition_list_t *parts);
    /* parts are revoked (not lost): finish what is in flight for them, so
     * that the commit that follows carries it. */
    void (*finishing)(void *arg, const rd_kafka_topic_partition_list_t *parts);
    /* parts are unassigned (revoked or lost): what the owner holds for them
     * is the next owner's to read again. */
    void (*revoked)(void *arg, const rd_kafka_topic_partition_list_t *parts);
};

struct kl_conf {
    const char *topic; /* the topic read, and the dead letters' source */
    const char *group; /* group.id */
    const char *who;   /* starts its log lines: "" or "payments: " */
    /* librdkafka settings unless kafka.consumer_properties say otherwise */
    const char *const *defaults;
    /* This consumer speaks for the brokers (see the contract). */
    bool brokers;
    /* The owner's metrics (cmetrics.h): partitions assigned (a gauge), dead
     * letters the broker took (a counter); fetching paused (a gauge) and the
     * synchronous commits (a counter), or NULL. */
    _Atomic int64_t *assigned, *letters, *paused, *commits;
    /* At kl_close, how long dead letters not acknowledged may take. */
    int letters_close_ms;
    struct kl_hooks hooks;
};

/* Make the dead-letter producer and the consumer (not subscribed yet).
 * conf is copied; its strings and c must outlive the kloop. 0, or -1 with
 * err (nothing left open). */
int kl_open(const struct cfg *c, const struct kl_conf *conf, struct kloop **out, char *err, size_t errlen);
/* Join the group on conf.topic. 0, or -1 with err. */
int kl_subscribe(struct kloop *k, char *err, size_t errlen);
/* Leave the group (revoked partitions commit as in a rebalance, the hooks
 * run), close the consumer, wait conf.letters_close_ms for the dead letters,
 * free everything. NULL is fine. */
void kl_close(struct kloop *k);

/* The consumer, for what is the owner's (the partitions' own queues). */
rd_kafka_t *kl_rk(const struct kloop *k);
/* The done queue and the dead-letter producer, to lend (see the contract). */
struct queue *kl_done_queue(struct kloop *k);
struct dlq *kl_dlq(struct kloop *k);

/* Take up to max messages from q (NULL: the consumer's queue, which also
 * serves the events: rebalances, errors, statistics): the first waiting up
 * to wait_ms, the others only if already there; each message to the take
 * hook, until it says there is no room. How many were taken (errors too). */
size_t kl_fetch(struct kloop *k, rd_kafka_queue_t *q, int wait_ms, size_t max);

/* Pause (or resume) fetching; why is said with a pause. A failure is said
 * once while it lasts, and the next call tries again. */
void kl_pause(struct kloop *k, bool pause, const char *why);
/* Pause fetching for good ("stopping"), partitions assigned later too; a
 * kl_pause after it changes nothing. */
void kl_stop_fetching(struct kloop *k);
bool kl_paused(const struct kloop *k);

/* Track a message fetched (offsets.h, off_track). 0 and *epoch, or -1: its
 * partition is not assigned any more (or out of memory): drop it. */
int kl_track(struct kloop *k, int32_t partition, int64_t offset, uint32_t *epoch);
/* The message is done: its offset may move (off_done's 0, or 1 stale). */
int kl_done(struct kloop *k, int32_t partition, uint32_t epoch, int64_t offset);
/* Messages in flight: over all partitions, of one partition. */
size_t kl_pending(const struct kloop *k);
size_t kl_inflight(const struct kloop *k, int32_t partition);
/* Store the offsets that moved (the next auto-commit carries them). */
void kl_store(struct kloop *k);
/* Store, then commit synchronously (counted in conf.commits). */
void kl_commit(struct kloop *k);

/* Hand m (payload, key, error, partition, offset, epoch set) to the
 * dead-letter producer: it is the kloop's then (it comes back on the done
 * queue once the broker has it). */
void kl_letter(struct kloop *k, struct cmsg *m);
/* Serve the producer's delivery reports for up to wait_ms, and send again
 * the letters it would not queue before. */
void kl_serve(struct kloop *k, int wait_ms);
/* Empty the done queue: each message done (kl_done), dead letters counted
 * (conf.letters), freed; the offsets stored when some moved. */
void kl_drain(struct kloop *k);
/* True while a dead letter is not acknowledged yet (or not even queued). */
bool kl_letters_out(const struct kloop *k);

/* True once the consumer or the dead-letter producer hit a fatal error. */
bool kl_fatal(const struct kloop *k);

#endif
