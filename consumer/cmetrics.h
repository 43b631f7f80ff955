/* cmetrics: the consumer's metrics, declared once and rendered from the
 * declaration (twemproxy style). Counters and gauges are atomics updated by
 * whichever thread sees the event; the HTTP thread only reads them. */
#ifndef SECKILL_CMETRICS_H
#define SECKILL_CMETRICS_H

#include <stdatomic.h>
#include <stdint.h>

#include "metrics.h"

/* X(member, name, labels, type, help). Entries of one family are adjacent. */
#define CM_METRICS(X)                                                                              \
    X(consumed, "seckill_consumer_consumed_total", "", "counter",                                  \
      "Messages received from the orders topic")                                                   \
    X(persisted, "seckill_consumer_persisted_total", "", "counter",                                \
      "Orders inserted into PostgreSQL")                                                           \
    X(duplicates, "seckill_consumer_duplicates_skipped_total", "", "counter",                      \
      "Redelivered orders that were already settled: persisted, or refused before")                \
    X(dead_lettered, "seckill_consumer_dead_lettered_total", "", "counter",                        \
      "Invalid messages written to the dead-letter topic")                                         \
    X(unsigned_orders, "seckill_consumer_orders_unsigned_total", "", "counter",                    \
      "Orders no producer key signed (forged, or a key the consumer lacks), dead-lettered")         \
    X(rej_no_item, "seckill_consumer_rejected_total", "reason=\"no_item\"", "counter",             \
      "Orders refused and recorded in order_rejections (alert on any)")                            \
    X(rej_no_stock, "seckill_consumer_rejected_total", "reason=\"no_stock\"", "counter", "")       \
    X(rej_id_conflict, "seckill_consumer_rejected_total", "reason=\"id_conflict\"", "counter", "") \
    X(rej_dup_buyer, "seckill_consumer_rejected_total", "reason=\"dup_buyer\"", "counter", "")     \
    X(batch_insert_first, "seckill_consumer_batches_total", "path=\"insert_first\"", "counter",    \
      "Batch transactions committed, by path: insert_first took every order for new, "           \
      "lookup_first looked up the orders already there first")                                    \
    X(batch_lookup_first, "seckill_consumer_batches_total", "path=\"lookup_first\"", "counter", "") \
    X(redo_existing, "seckill_consumer_batch_redos_total", "reason=\"existing\"", "counter",       \
      "Batch transactions rolled back and redone: existing (an order not looked up was already "  \
      "there), stock_race (a concurrent batch took the stock first)")                             \
    X(redo_stock, "seckill_consumer_batch_redos_total", "reason=\"stock_race\"", "counter", "")    \
    X(stale_fence, "seckill_consumer_stale_fence_total", "", "counter",                            \
      "User writes refused by the fence check (retried under a fresh lock)")                       \
    X(lease_lost, "seckill_consumer_lease_lost_rollbacks_total", "", "counter",                    \
      "Batches rolled back because a lease was lost before commit")                                \
    X(lock_busy, "seckill_consumer_lock_busy_total", "", "counter",                                \
      "Users whose lock was not acquired in time (retried)")                                       \
    X(pg_errors, "seckill_consumer_pg_errors_total", "", "counter",                                \
      "Failed PostgreSQL transactions (retried)")                                                  \
    X(redis_errors, "seckill_consumer_redis_errors_total", "", "counter",                          \
      "Failed Redis round trips (lock or reservation clean-up)")                                   \
    X(offset_commits, "seckill_consumer_offset_commits_total", "", "counter",                      \
      "Synchronous offset commits (revoke, stop)")                                                 \
    X(fetched, "seckill_consumer_fetched_total", "", "counter",                                    \
      "Messages fetched from the brokers (librdkafka statistics): above consumed_total when "     \
      "fetched messages were thrown away and fetched again")                                      \
    X(expired, "seckill_consumer_orders_expired_total", "", "counter",                             \
      "Orders expired unpaid by this consumer, their units given back to stock_left")             \
    X(returned, "seckill_consumer_units_returned_total", "", "counter",                            \
      "Units of expired orders given back to Redis by this consumer (each order once)")            \
    X(returns_pending, "seckill_consumer_returns_pending", "", "gauge",                            \
      "Units expired in PostgreSQL that Redis does not have back yet (order_returns not done; "    \
      "retried); the same for every consumer of the database")                                     \
    X(pending, "seckill_consumer_pending_messages", "", "gauge",                                   \
      "Messages received and not yet settled")                                                     \
    X(uncleared, "seckill_consumer_uncleared_reservations", "", "gauge",                          \
      "Persisted orders whose reservation Redis has not cleared yet (retried); their offsets wait") \
    X(paused, "seckill_consumer_paused", "", "gauge",                                              \
      "1 while fetching is paused (backpressure or a dependency down)")                            \
    X(assigned, "seckill_consumer_assigned_partitions", "", "gauge",                               \
      "Partitions assigned to this instance")                                                      \
    X(pg_down, "seckill_consumer_pg_down_workers", "", "gauge",                                    \
      "Workers that cannot reach PostgreSQL")                                                      \
    X(redis_down, "seckill_consumer_redis_down_workers", "", "gauge",                              \
      "Workers that cannot reach Redis")                                                           \
    X(kafka_up, "seckill_consumer_kafka_up", "", "gauge",                                          \
      "1 while a broker connection is up (librdkafka statistics); 0 when refused or all down")      \
    X(payments_applied, "seckill_consumer_payments_applied_total", "", "counter",                  \
      "Payments that moved an order from pending_payment to paid")                                 \
    X(payments_replayed, "seckill_consumer_payments_replayed_total", "", "counter",                \
      "Payments seen again (a redelivery or a replay) that changed nothing")                       \
    X(late_payments, "seckill_consumer_late_payments_total", "", "counter",                        \
      "Payments for orders no longer waiting for one (expired, cancelled, final, refused or paid "  \
      "by another payment), recorded in late_payments for the shop to refund")                     \
    X(payments_dead_letter, "seckill_consumer_payments_dead_lettered_total", "", "counter",        \
      "Payments written to the dead-letter topic: malformed, unsigned, an order id never issued, "  \
      "their order unknown after consumer.payment_wait_ms, or the waiting set full")               \
    X(payments_never_issued, "seckill_consumer_payments_never_issued_total", "", "counter",        \
      "Payments for an order id no producer could have issued (its block 0 or above the highest "  \
      "taken), dead-lettered at once")                                                             \
    X(payments_wait_full, "seckill_consumer_payments_wait_full_total", "", "counter",              \
      "Payments dead-lettered to make room in a full waiting set (consumer.payment_wait_max)")     \
    X(payments_unsigned, "seckill_consumer_payments_unsigned_total", "", "counter",                \
      "Payments no payment key signed (no sig, an unknown key id, a MAC that does not match: "     \
      "forged, or a key the consumer lacks), dead-lettered")                                       \
    X(payments_waiting, "seckill_consumer_payments_waiting", "", "gauge",                          \
      "Payments whose order is not in PostgreSQL yet (looked for again; their offsets wait)")      \
    X(payments_assigned, "seckill_consumer_payments_assigned_partitions", "", "gauge",             \
      "Partitions of the payments topic assigned to this instance")                                \
    /* buyers' cancels (issue #44), the outcomes CANCELLED and CANCEL_NOOP of queue.h */           \
    X(cancels_applied, "seckill_consumer_cancels_total", "result=\"applied\"", "counter",          \
      "Buyers' cancels taken from the orders topic: applied (the order was pending payment: "      \
      "cancelled, its unit given back), noop (not pending: paid, expired, cancelled already, "     \
      "final or unknown; nothing changed)")                                                        \
    X(cancels_noop, "seckill_consumer_cancels_total", "result=\"noop\"", "counter", "")

/* X(member, name, help): struct lock_counters, summed over the workers. */
#define CM_LOCK_COUNTERS(X)                                                                        \
    X(acquired, "seckill_consumer_lock_acquired_total", "Lock acquisitions")                      \
    X(contended, "seckill_consumer_lock_contended_total", "Acquisitions that had to wait")        \
    X(timeouts, "seckill_consumer_lock_timeouts_total", "Acquisitions that gave up waiting")      \
    X(renewals, "seckill_consumer_lock_renewals_total", "Leases renewed by the watchdog")         \
    X(lost, "seckill_consumer_lock_lost_total", "Leases lost while held")                         \
    X(not_held, "seckill_consumer_lock_not_held_total", "Releases of locks no longer held")       \
    X(errors, "seckill_consumer_lock_errors_total", "Redis errors in the lock client")

#define CM_MAX_PARTITIONS 256
#define CM_MAX_WORKERS 256
#define CM_BATCH_BUCKETS 10

struct cm_lock_slot {
#define CM_X(m, name, help) _Atomic uint64_t m;
    CM_LOCK_COUNTERS(CM_X)
#undef CM_X
};

struct cmetrics {
#define CM_X(m, name, labels, type, help) _Atomic int64_t m;
    CM_METRICS(CM_X)
#undef CM_X
    struct metrics_hist lock_wait;
    struct metrics_hist txn;
    _Atomic uint64_t batch_bucket[CM_BATCH_BUCKETS + 1];
    _Atomic uint64_t batch_count, batch_sum;
    _Atomic int64_t lag[CM_MAX_PARTITIONS]; /* -1: unknown or not assigned */
    struct cm_lock_slot lock[CM_MAX_WORKERS];
};

extern struct cmetrics cm;

void cm_init(void);
void cm_batch_observe(int64_t n);
/* The counter a settled outcome bumps (the metric column of CMSG_OUTCOMES
 * in queue.h), or NULL for one counted elsewhere or not at all. */
_Atomic int64_t *cm_outcome_counter(int outcome);
/* Count a settled outcome in its counter, if it has one. */
void cm_count_outcome(int outcome);
/* Parse librdkafka's statistics JSON for consumer_lag per partition of
 * topic, and whether any broker connection is up (kafka_up, also returned:
 * 1 or 0; -1 when the JSON could not be read). */
int cm_stats_parse(const char *json, size_t len, const char *topic);
/* Prometheus text for /metrics. */
void cm_render(struct mbuf *b);

#define CM_ADD(m, n) atomic_fetch_add_explicit(&cm.m, (n), memory_order_relaxed)
#define CM_SET(m, v) atomic_store_explicit(&cm.m, (v), memory_order_relaxed)
#define CM_GET(m) atomic_load_explicit(&cm.m, memory_order_relaxed)

#endif
