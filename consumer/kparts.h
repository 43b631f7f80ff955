/* kparts: a consumer's assigned partitions, between librdkafka and the
 * offsets table (offsets.h, which knows nothing of Kafka).
 *
 * The daemon's Kafka consumer loop (kloop.h: the orders pipeline's and the
 * payments') keeps its in-flight offsets in an off_table and does a few
 * things with librdkafka around it; they are here:
 * - kp_store: every partition whose watermark moved gets its next offset
 *   stored (rd_kafka_offsets_store), for the next commit to carry;
 * - kp_commit: that, then a synchronous commit, before partitions are given
 *   up or the consumer stops, so the next owner starts where this one did;
 * - kp_assign / kp_unassign: a rebalance's partitions tracked afresh (or
 *   forgotten) in the table and (un)assigned, the whole assignment at once
 *   (KP_ASSIGNOR is eager);
 * - kp_pause: fetching of the whole assignment paused or resumed;
 * - kp_close: the consumer out of the group and gone.
 *
 * Poll thread only (like the table). `who` starts each line it logs, so
 * each consumer's lines say whose they are ("" or "payments: "). */
#ifndef SECKILL_KPARTS_H
#define SECKILL_KPARTS_H

#include <librdkafka/rdkafka.h>
#include <stdbool.h>

#include "offsets.h"

/* The group's assignor, eager. cooperative-sticky would move only the
 * partitions that change owner, but Debian's librdkafka (2.0.2) has two
 * bugs on that path that end a consumer stopped while its group settles:
 * an abort in rd_kafka_destroy when the first assignment has not yet come
 * (librdkafka issue #4312, fixed in 2.3.0) and a hang for good in
 * rd_kafka_consumer_close when an incremental assignment comes during it
 * (#4527, fixed in 2.4.0). Eager costs a pause of every member on each
 * rebalance (the revoke finishes and commits in-flight work), which a sale's
 * few consumers, joining rarely, pay seldom. Every member of a group must
 * name the same assignor: stop all consumers of the group before starting
 * ones with another. */
#define KP_ASSIGNOR "roundrobin"

/* Store the moved watermarks of topic's partitions; a failure is logged at
 * debug level (the next store carries the same offsets again). */
void kp_store(rd_kafka_t *rk, struct off_table *t, const char *topic, const char *who);
/* kp_store, then commit synchronously. Returns the commit's result; any
 * error but "no offset to commit" is logged. */
rd_kafka_resp_err_t kp_commit(rd_kafka_t *rk, struct off_table *t, const char *topic, const char *who);

/* Track parts afresh in t, then assign them. Errors are logged. */
void kp_assign(rd_kafka_t *rk, struct off_table *t, rd_kafka_topic_partition_list_t *parts, const char *who);
/* Forget parts in t (their in-flight work no longer counts), then unassign
 * them (under an eager assignor, parts is the whole assignment). Errors are
 * logged. */
void kp_unassign(rd_kafka_t *rk, struct off_table *t, rd_kafka_topic_partition_list_t *parts,
                 const char *who);

/* Pause (or resume) fetching every assigned partition; the error, if any. */
rd_kafka_resp_err_t kp_pause(rd_kafka_t *rk, bool pause);

/* Leave the group (the revoke callback commits what was stored) and destroy
 * rk; NULL is nothing. A failed close is logged. */
void kp_close(rd_kafka_t *rk, const char *who);

#endif
