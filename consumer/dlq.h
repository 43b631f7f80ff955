/* dlq: the dead-letter producer.
 *
 * An invalid message is written to kafka.dlq_topic with headers saying why
 * (error, source_topic, source_partition, source_offset) by an idempotent
 * producer. Its offset may move on only once the broker acknowledged the
 * dead letter: the delivery report pushes the message onto the done queue.
 * A failed delivery is sent again, never dropped. */
#ifndef SECKILL_DLQ_H
#define SECKILL_DLQ_H

#include <stdbool.h>
#include <stddef.h>

#include "cfg.h"
#include "queue.h"

struct dlq;

/* A producer of dead letters for the messages of source_topic (their
 * source_topic header); done receives each message once its dead letter is
 * acknowledged. c and source_topic must outlive it. */
int dlq_open(const struct cfg *c, const char *source_topic, struct queue *done, struct dlq **out, char *err,
             size_t errlen);
/* Hand m (with payload, key and error set) over; thread-safe. m belongs to
 * the dlq until it shows up on the done queue. 0 or -1 (m is still yours). */
int dlq_send(struct dlq *d, struct cmsg *m);
/* dlq_send each message of the list linked through next; returns the ones
 * the producer would not queue yet (still the caller's), for a later try. */
struct cmsg *dlq_send_list(struct dlq *d, struct cmsg *list);
/* Serve delivery reports; call often from one thread. */
void dlq_poll(struct dlq *d, int timeout_ms);
/* Letters handed over and not acknowledged yet; any thread. */
int dlq_outstanding(const struct dlq *d);
/* True once the producer hit a fatal error: no dead letter can be written
 * any more, and the consumer must stop (kconf_fatal). */
bool dlq_fatal(const struct dlq *d);
/* Wait up to timeout_ms for every letter to be acknowledged, then close.
 * Messages still unacknowledged are freed (their offsets never moved). */
void dlq_close(struct dlq *d, int timeout_ms);

#endif
