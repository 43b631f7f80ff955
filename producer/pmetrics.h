/* pmetrics: the producer's metrics, declared once.
 *
 * X(field, family, type, labels, help): consecutive entries of one family
 * share its HELP and TYPE lines. */
#ifndef SECKILL_PMETRICS_H
#define SECKILL_PMETRICS_H

#include <stdatomic.h>
#include <stdint.h>

#include "metrics.h"

#define PM_REQ "seckill_producer_requests_total"
#define PM_REQ_HELP "HTTP requests by outcome"
#define PM_AUTH "seckill_producer_auth_tokens_total"
#define PM_AUTH_HELP "Bearer tokens checked, by result (cached: verified earlier, still valid)"
#define PM_KAFKA "seckill_producer_kafka_errors_total"
#define PM_KAFKA_HELP "Orders Kafka did not take, by kind"
#define PM_LIMITED "seckill_producer_limited_total"
#define PM_LIMITED_HELP \
    "Requests answered 429 rate_limited (address, buyer) and connections closed at accept "                \
    "(connections), by limit"
#define PM_CANCEL_REFUSED "seckill_producer_cancels_refused_total"
#define PM_CANCEL_REFUSED_HELP \
    "Buyers' cancels not published, by reason: the order's state (paid, expired, refused, final: 409), "  \
    "not_found (404: missing or another buyer's), unavailable (503: Redis or Kafka refused, nothing "     \
    "published), unknown (503: Kafka may hold it)"
#define PM_CANCEL_PUB "seckill_producer_cancel_publish_errors_total"
#define PM_CANCEL_PUB_HELP "Cancels Kafka did not take, by kind (also in cancels_refused_total)"

#define PM_ADM_REFUSED "seckill_producer_admission_refused_total"
#define PM_ADM_REFUSED_HELP \
    "Buys of a queued item refused for their admission (403 admission_refused), by reason "               \
    "(common/sale/admtoken.h; also in requests_total)"

#define PM_XFER "seckill_producer_bucket_transfers_total"
#define PM_XFER_HELP \
    "Transfers that refilled a dry bucket (issue #57), by source: the item's reserve, or its fullest "     \
    "other bucket once the reserve is empty"

#define PM_METRICS(X)                                                                            \
    X(xfer_reserve, PM_XFER, "counter", "from=\"reserve\"", PM_XFER_HELP)                         \
    X(xfer_bucket, PM_XFER, "counter", "from=\"bucket\"", PM_XFER_HELP)                           \
    X(xfer_given_back, "seckill_producer_bucket_given_back_units_total", "counter", "",          \
      "Units given back in a bucket (Kafka refused the order) that a transfer then moved to the "  \
      "item's reserve")                                                                          \
    X(xfer_units, "seckill_producer_bucket_transfer_units_total", "counter", "",                 \
      "Units moved by transfers: the refills, and the give-backs sent on to the reserve")       \
    X(xfer_swept, "seckill_producer_bucket_transfers_finished_total", "counter", "",             \
      "Transfers between an item's slots that the sweeper found half done and finished (another "  \
      "producer died, or stopped, between the halves)")                                          \
    X(xfer_failed, "seckill_producer_bucket_transfer_failures_total", "counter", "",             \
      "Transfers left half done (the units in flight, finished by this producer when Redis answers)") \
    X(bucket_retries, "seckill_producer_bucket_dry_retries_total", "counter", "",                \
      "Buys tried again after their dry bucket was refilled")                                    \
    X(bucket_dry_busy, "seckill_producer_bucket_dry_unavailable_total", "counter", "",           \
      "Buys answered 503 while units remained elsewhere (their bucket ran dry again each try)")  \
    X(bucket_relearned, "seckill_producer_bucket_relearned_total", "counter", "",                \
      "Buys sent to an item's own slot after it had buckets, sent again to the buyer's bucket") \
    X(req_accepted, PM_REQ, "counter", "outcome=\"accepted\"", PM_REQ_HELP)                       \
    X(req_duplicate, PM_REQ, "counter", "outcome=\"duplicate\"", PM_REQ_HELP)                     \
    X(req_sold_out, PM_REQ, "counter", "outcome=\"sold_out\"", PM_REQ_HELP)                       \
    X(req_unknown_item, PM_REQ, "counter", "outcome=\"unknown_item\"", PM_REQ_HELP)               \
    X(req_not_started, PM_REQ, "counter", "outcome=\"not_started\"", PM_REQ_HELP)                 \
    X(req_ended, PM_REQ, "counter", "outcome=\"ended\"", PM_REQ_HELP)                             \
    X(req_paused, PM_REQ, "counter", "outcome=\"paused\"", PM_REQ_HELP)                           \
    X(req_unauthorized, PM_REQ, "counter", "outcome=\"unauthorized\"", PM_REQ_HELP)               \
    X(req_forbidden, PM_REQ, "counter", "outcome=\"forbidden\"", PM_REQ_HELP)                     \
    X(req_status, PM_REQ, "counter", "outcome=\"status\"", PM_REQ_HELP)                           \
    X(req_bad_request, PM_REQ, "counter", "outcome=\"bad_request\"", PM_REQ_HELP)                 \
    X(req_unavailable, PM_REQ, "counter", "outcome=\"unavailable\"", PM_REQ_HELP)                 \
    X(req_unknown, PM_REQ, "counter", "outcome=\"unknown\"", PM_REQ_HELP)                         \
    X(req_overloaded, PM_REQ, "counter", "outcome=\"overloaded\"", PM_REQ_HELP)                   \
    X(req_not_found, PM_REQ, "counter", "outcome=\"not_found\"", PM_REQ_HELP)                     \
    X(req_cancel, PM_REQ, "counter", "outcome=\"cancel\"", PM_REQ_HELP)                           \
    X(req_queue, PM_REQ, "counter", "outcome=\"queue\"", PM_REQ_HELP)                             \
    X(req_admission_refused, PM_REQ, "counter", "outcome=\"admission_refused\"", PM_REQ_HELP)     \
    X(adm_refused_MISSING, PM_ADM_REFUSED, "counter", "reason=\"missing\"", PM_ADM_REFUSED_HELP)   \
    X(adm_refused_MALFORMED, PM_ADM_REFUSED, "counter", "reason=\"malformed\"", PM_ADM_REFUSED_HELP) \
    X(adm_refused_UNKNOWN_KEY, PM_ADM_REFUSED, "counter", "reason=\"unknown_key\"", PM_ADM_REFUSED_HELP) \
    X(adm_refused_BAD_SIGNATURE, PM_ADM_REFUSED, "counter", "reason=\"bad_signature\"",              \
      PM_ADM_REFUSED_HELP)                                                                        \
    X(adm_refused_OTHER_ITEM, PM_ADM_REFUSED, "counter", "reason=\"other_item\"", PM_ADM_REFUSED_HELP) \
    X(adm_refused_OTHER_BUYER, PM_ADM_REFUSED, "counter", "reason=\"other_buyer\"", PM_ADM_REFUSED_HELP) \
    X(adm_refused_BEFORE_OPENING, PM_ADM_REFUSED, "counter", "reason=\"before_opening\"",            \
      PM_ADM_REFUSED_HELP)                                                                        \
    X(adm_refused_EXPIRED, PM_ADM_REFUSED, "counter", "reason=\"expired\"", PM_ADM_REFUSED_HELP)   \
    X(adm_refused_USED, PM_ADM_REFUSED, "counter", "reason=\"used\"", PM_ADM_REFUSED_HELP)         \
    X(adm_refused_LAPSED, PM_ADM_REFUSED, "counter", "reason=\"lapsed\"", PM_ADM_REFUSED_HELP)     \
    X(adm_refused_OTHER_SALE, PM_ADM_REFUSED, "counter", "reason=\"other_sale\"", PM_ADM_REFUSED_HELP) \
    X(queue_items, "seckill_producer_queue_items", "gauge", "",                                    \
      "Items with a waiting room this producer watches")                                         \
    X(queue_leases, "seckill_producer_queue_admitting_items", "gauge", "",                         \
      "Items whose admission this producer runs (it holds their lease: one producer at a time)")  \
    X(queue_waiting, "seckill_producer_queue_waiting", "gauge", "",                                \
      "Waiters in the items' lines not yet called, all items (the pre-queue included)")          \
    X(queue_prequeue, "seckill_producer_queue_prequeue", "gauge", "",                              \
      "Waiters who joined before the opening and are not placed yet, all items")                 \
    X(queue_serving, "seckill_producer_queue_serving", "gauge", "",                                \
      "The serving numbers: places called so far (admitted or passed over), summed over items")   \
    X(queue_outstanding, "seckill_producer_queue_admissions_outstanding", "gauge", "",             \
      "Admissions given and neither spent nor run out, all items")                                \
    X(queue_rate, "seckill_producer_queue_admission_rate", "gauge", "",                            \
      "Admissions per second this producer aims at, summed over the items it admits for")        \
    X(queue_paused, "seckill_producer_queue_paused_items", "gauge", "",                            \
      "Items whose admission an operator paused (seckillctl queue pause)")                        \
    X(queue_stalled, "seckill_producer_queue_stalled_items", "gauge", "",                          \
      "Items with waiters and units left, in their sale window and not paused, whose serving "     \
      "number has not moved for longer than an admission's life plus 5 s (alert SeckillQueueStalled)") \
    X(queue_floor, "seckill_producer_queue_items_at_floor", "gauge", "",                           \
      "Items whose admission rate this producer holds at the loop's floor: the sale does not hold " \
      "more (alert SeckillAdmissionAtFloor)")                                                     \
    X(queue_admitted, "seckill_producer_queue_admitted_total", "counter", "",                      \
      "Waiters this producer admitted")                                                           \
    X(queue_passed, "seckill_producer_queue_abandoned_total", "counter", "",                       \
      "Places this producer passed over: their waiter had stopped asking (producer.queue_abandon_s)") \
    X(queue_lapsed, "seckill_producer_queue_admissions_lapsed_total", "counter", "",               \
      "Admissions that ran out unspent (producer.queue_token_life_s): their slot went to the next") \
    X(queue_rate_down, "seckill_producer_queue_rate_decreases_total", "counter", "",               \
      "Times the admission rate stepped down: the accepted p99 or the backlog said the sale did not "     \
      "hold it")                                                                                  \
    X(queue_eta_error_ms, "seckill_producer_queue_eta_error_milliseconds_total", "counter", "",    \
      "Sum over admitted waiters of |when admitted - when the last ETA told them|, ms")           \
    X(queue_eta_checks, "seckill_producer_queue_eta_checks_total", "counter", "",                  \
      "Admitted waiters who had been told an ETA (the divisor of the ETA error)")                 \
    X(queue_told_admitted, "seckill_producer_queue_told_admitted_total", "counter", "",            \
      "Queue answers that carried an admission token")                                            \
    X(queue_told_sold_out, "seckill_producer_queue_told_sold_out_total", "counter", "",            \
      "Queue answers that said sold out")                                                         \
    X(queue_asks_local, "seckill_producer_queue_asks_local_total", "counter", "",                  \
      "Queue answers given from the producer's copy of the line, without Redis (waiting only)")  \
    X(auth_verified, PM_AUTH, "counter", "result=\"verified\"", PM_AUTH_HELP)                   \
    X(auth_cached, PM_AUTH, "counter", "result=\"cached\"", PM_AUTH_HELP)                       \
    X(auth_denied, PM_AUTH, "counter", "result=\"denied\"", PM_AUTH_HELP)                       \
    X(sold_out_local, "seckill_producer_sold_out_local_total", "counter", "",                       \
      "Sold-out and ended answers (410) given without asking Redis (also in requests_total)")          \
    X(limited_address, PM_LIMITED, "counter", "reason=\"address\"", PM_LIMITED_HELP)               \
    X(limited_buyer, PM_LIMITED, "counter", "reason=\"buyer\"", PM_LIMITED_HELP)                   \
    X(limited_connections, PM_LIMITED, "counter", "reason=\"connections\"", PM_LIMITED_HELP)       \
    X(head_refused, "seckill_producer_head_refused_total", "counter", "",                          \
      "Requests refused for their head: ambiguous framing, obs-fold, a bare CR or LF, a field name "   \
      "not a token, no Host... (400/411, connection closed; also in requests_total as bad_request)")  \
    X(body_refused, "seckill_producer_body_refused_total", "counter", "",                          \
      "Chunked requests refused for their body: a chunk line or trailer not as strict as a head "      \
      "(400), or chunks past producer.body_limit (413); connection closed; also in requests_total as " \
      "bad_request")                                                                                  \
    X(request_timeouts, "seckill_producer_request_timeouts_total", "counter", "",                  \
      "Connections closed for want of a whole request, head and body, within "                        \
      "producer.request_timeout_s")                                                                    \
    X(http_library_messages, "seckill_producer_http_library_messages_total", "counter", "",        \
      "Messages of libmicrohttpd (a request it refused itself, a client gone mid-request); "         \
      "each kind is logged once while it repeats")                                                 \
    X(duplicate_local, "seckill_producer_duplicate_local_total", "counter", "",                    \
      "Duplicate answers (409) given from remembered winners without asking Redis (also in requests_total)") \
    X(winners, "seckill_producer_winners", "gauge", "",                                            \
      "Buyers this producer remembers holding a unit (answered 409 by itself)")                    \
    X(winners_dropped, "seckill_producer_winners_dropped_total", "counter", "",                    \
      "Times an item's remembered winners were dropped: Redis's view of it moved (a unit given back)") \
    X(soldout_items, "seckill_producer_sold_out_items", "gauge", "",                               \
      "Items this producer answers sold out by itself, their buyers copied from Redis")        \
    X(soldout_copies, "seckill_producer_sold_out_copies_total", "counter", "",                     \
      "Buyer sets of sold-out items copied from Redis")                                        \
    X(check_passes, "seckill_producer_item_check_passes_total", "counter", "",                     \
      "Passes of the sold-out thread over the items it watches (each producer.soldout_refresh_ms)") \
    X(item_checks, "seckill_producer_item_checks_total", "counter", "",                            \
      "Items checked in Redis (seckill_soldout) by those passes: one per item per pass, for the "  \
      "sold-out view and the winners together")                                                    \
    X(inflight, "seckill_producer_inflight", "gauge", "",                                        \
      "Buy, status and cancel requests between parsing and their answer")                             \
    X(script_unknown_code, "seckill_producer_script_unknown_codes_total", "counter", "",         \
      "Reservation script replies the outcome table does not know (answered 503)")              \
    X(redis_errors, "seckill_producer_redis_errors_total", "counter", "",                        \
      "Redis commands that failed (connection, timeout, error reply)")                           \
    X(redis_up, "seckill_producer_redis_up", "gauge", "",                                        \
      "1 when the reserving thread's Redis connection works")                                    \
    X(redis_functions_missing, "seckill_producer_redis_functions_missing", "gauge", "",          \
      "1 while Redis lacks the producer's function library, or holds an older one: 503s")        \
    X(redis_primary_moves, "seckill_producer_redis_primary_moves_total", "counter", "",          \
      "Times the Redis primary moved (Sentinel switch or a READONLY reply): connections reopened") \
    X(replica_ack_short, "seckill_producer_replica_ack_short_total", "counter", "",              \
      "Reservations answered 503 because WAIT saw fewer than redis.min_replicas_ack replicas "   \
      "(left to the sweeper)")                                                                   \
    X(redis_roundtrips, "seckill_producer_redis_roundtrips_total", "counter", "",                \
      "Pipelined round trips to Redis (reservations are batched per round trip)")                \
    X(reserved, "seckill_producer_reservations_total", "counter", "",                            \
      "Units reserved by the Lua script")                                                        \
    X(kafka_queue_full, PM_KAFKA, "counter", "kind=\"queue_full\"", PM_KAFKA_HELP)                \
    X(kafka_not_persisted, PM_KAFKA, "counter", "kind=\"not_persisted\"", PM_KAFKA_HELP)          \
    X(kafka_possibly_persisted, PM_KAFKA, "counter", "kind=\"possibly_persisted\"", PM_KAFKA_HELP) \
    X(kafka_up, "seckill_producer_kafka_up", "gauge", "", "1 when broker metadata answers")     \
    X(cancel_accepted, "seckill_producer_cancels_accepted_total", "counter", "",                   \
      "Buyers' cancels published and acknowledged by Kafka (202 cancelling)")                    \
    X(cancel_again, "seckill_producer_cancels_repeated_total", "counter", "",                      \
      "Buyers' cancels of an order already cancelled (202 cancelled, nothing published)")        \
    X(cancel_refused_paid, PM_CANCEL_REFUSED, "counter", "reason=\"paid\"", PM_CANCEL_REFUSED_HELP) \
    X(cancel_refused_expired, PM_CANCEL_REFUSED, "counter", "reason=\"expired\"", PM_CANCEL_REFUSED_HELP) \
    X(cancel_refused_refused, PM_CANCEL_REFUSED, "counter", "reason=\"refused\"", PM_CANCEL_REFUSED_HELP) \
    X(cancel_refused_final, PM_CANCEL_REFUSED, "counter", "reason=\"final\"", PM_CANCEL_REFUSED_HELP) \
    X(cancel_refused_not_found, PM_CANCEL_REFUSED, "counter", "reason=\"not_found\"",            \
      PM_CANCEL_REFUSED_HELP)                                                                    \
    X(cancel_refused_unavailable, PM_CANCEL_REFUSED, "counter", "reason=\"unavailable\"",        \
      PM_CANCEL_REFUSED_HELP)                                                                    \
    X(cancel_refused_unknown, PM_CANCEL_REFUSED, "counter", "reason=\"unknown\"", PM_CANCEL_REFUSED_HELP) \
    X(cancel_publish_queue_full, PM_CANCEL_PUB, "counter", "kind=\"queue_full\"", PM_CANCEL_PUB_HELP) \
    X(cancel_publish_not_persisted, PM_CANCEL_PUB, "counter", "kind=\"not_persisted\"",         \
      PM_CANCEL_PUB_HELP)                                                                        \
    X(cancel_publish_possibly_persisted, PM_CANCEL_PUB, "counter", "kind=\"possibly_persisted\"", \
      PM_CANCEL_PUB_HELP)                                                                        \
    X(restored, "seckill_producer_restored_total", "counter", "",                               \
      "Reservations given back because Kafka certainly did not persist them")                   \
    X(restore_kept, "seckill_producer_restore_kept_total", "counter", "",                       \
      "Give-backs refused because the sweeper had claimed the reservation")                     \
    X(refused_unknown, "seckill_producer_refused_unknown_total", "counter", "",                 \
      "Buys Kafka refused whose unit was not given back at once: answered 503 unknown")         \
    X(ambiguous, "seckill_producer_ambiguous_total", "counter", "",                             \
      "Reservations whose Redis reply was lost and could not be checked (left to the sweeper)") \
    X(pending, "seckill_producer_pending_reservations", "gauge", "",                            \
      "Reservations in Redis not yet persisted by the consumer, all items")                     \
    X(unpublished, "seckill_producer_unpublished_reservations", "gauge", "",                    \
      "Reservations in Redis not yet acknowledged by Kafka, all items")                         \
    X(buckets_crowded, "seckill_producer_buckets_crowded_items", "gauge", "",                   \
      "Items whose buckets share a Redis primary while another has none of them (a reshard)")   \
    X(swept, "seckill_producer_swept_total", "counter", "",                                     \
      "Stale reservations re-published by the sweeper")                                         \
    X(sweep_errors, "seckill_producer_sweep_errors_total", "counter", "",                       \
      "Sweeper passes or re-publishes that failed")                                             \
    X(id_block, "seckill_producer_order_id_block", "gauge", "",                                 \
      "The order id block in use")

struct pm {
#define PM_FIELD(f, fam, type, labels, help) _Atomic int64_t f;
    PM_METRICS(PM_FIELD)
#undef PM_FIELD
    struct metrics_hist latency; /* request arrival to answer, accepted or not */
    struct metrics_hist latency_accepted; /* a buy's arrival to its 202: what a buyer who got one waited */
};

extern struct pm pm;

#define PM_ADD(f, n) atomic_fetch_add_explicit(&pm.f, (n), memory_order_relaxed)
#define PM_INC(f) PM_ADD(f, 1)
#define PM_SET(f, v) atomic_store_explicit(&pm.f, (v), memory_order_relaxed)

/* The whole exposition. */
void pm_render(struct mbuf *b);

#endif
