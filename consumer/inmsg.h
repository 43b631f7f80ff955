/* inmsg: turning a fetched Kafka message into work for the consumer.
 *
 * The live pipeline and the replay read the same topic and must judge every
 * message the same way: decode it, check its producer's MAC and that its key
 * is its user, and for a
 * message that fails, keep its raw bytes and the reason for the dead-letter
 * topic. */
#ifndef SECKILL_INMSG_H
#define SECKILL_INMSG_H

#include <librdkafka/rdkafka.h>
#include <stddef.h>

#include "queue.h"

/* Beyond year 9999 PostgreSQL cannot store the timestamp. */
#define INMSG_RESERVED_AT_MAX_MS INT64_C(253402300799999)

/* Decode km into m->o and check that a producer signed it (the process's
 * order keys, ordersig.h; a failure is counted as unsigned_orders). A
 * buyer's cancel (m->o.kind ORDER_CANCEL) is judged the same way, its MAC
 * over a cancel's own text, so an order's MAC never passes for a cancel;
 * what fails goes to the dead-letter topic like a forged order. The Kafka
 * key must be the user id: a message without one is refused too.
 * 0, or -1 with the reason in err. */
int inmsg_decode(const rd_kafka_message_t *km, struct cmsg *m, char *err, size_t errlen);

/* Keep km's payload, key and the reason in m for the dead-letter producer.
 * 0, or -1 out of memory (m is then as before). */
int inmsg_keep_raw(const rd_kafka_message_t *km, struct cmsg *m, const char *reason);

#endif
