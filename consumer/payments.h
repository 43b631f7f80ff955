/* payments: the shop's payments move orders from pending_payment to paid,
 * each exactly once (issue #44).
 *
 * A thread of the consumer's own, with a Kafka consumer of its own on
 * kafka.payments_topic (group <consumer.group_id>.payments), its own lock
 * client, PostgreSQL and Redis connections, made and remade here with
 * backoff. A payment message is paymsg.h's, keyed by the user id and
 * signed by the payment service (paysig.h). The payments fetched and due
 * are applied in
 * batches of up to 1,024 (PAY_BATCH in payments.c), each payment
 * exactly as if it were alone:
 *
 * 1. A batch holds one payment per user, taken in arrival order: a user's
 *    payments apply in the order they came, and a second payment of an
 *    order never overtakes the first. A payment waiting for its order holds
 *    back no one else's, nor its user's payments of other orders.
 * 2. Under the users' locks (the workers' own, "user:ID", lock.h), taken in
 *    one round trip; a user whose lock is held elsewhere has their payment
 *    tried again soon, the others go on. One transaction for the batch:
 *    advance the users' fences (consumer/sql/pay_fence.sql; a stale one has
 *    its payment retried under a fresh lock, the others go on), then pay
 *    each order still pending_payment (pay_apply.sql, one conditional
 *    UPDATE for the batch). A payment that paid nothing is told apart
 *    (pay_order.sql): already paid by this payment is a replay (nothing
 *    changes); expired, cancelled, final, paid by another payment or
 *    refused records a late payment (pay_late.sql: late_payments, once per
 *    order and reference) and leaves the order and the stock alone; found
 *    nowhere, the order is not persisted yet: the payment waits (retried
 *    with backoff, its offset held) up to consumer.payment_wait_ms, then
 *    goes to the dead-letter topic ("order unknown"). One commit. A lease
 *    lost before it, or any failure, rolls the batch back: all of it is
 *    tried again.
 * 3. After the commit, the orders paid become 'p' in their items' orders
 *    hashes (seckill_mark, the buyers' status calls) in one pipelined round
 *    trip, best effort: PostgreSQL decides, a failure is logged once per
 *    state change and counted. Then the locks are released, in one round
 *    trip.
 * 4. Only then are the messages' offsets stored (never past a payment not
 *    done), so a crash loses none, and a replay changes nothing.
 *
 * A malformed message (bad JSON, another version, a key that is not its
 * user) and one no payment key signed (no "sig", an unknown key id, a MAC
 * that does not match: counted as payments_unsigned) go to the dead-letter
 * topic with their reason, their offsets stored once the broker has the
 * letter; they never change an order nor write late_payments. PostgreSQL or Redis down: retried with
 * backoff, said once per state change.
 *
 * payments_start and payments_stop belong to the consumer's main thread. */
#ifndef SECKILL_PAYMENTS_H
#define SECKILL_PAYMENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cfg.h"

struct payments;

/* Make the Kafka clients (the consumer and its dead-letter producer) and
 * start the thread, which connects to the rest itself. c must outlive
 * payments_stop. 0, or -1 with err. */
int payments_start(const struct cfg *c, struct payments **out, char *err, size_t errlen);
/* True once a Kafka client hit a fatal error (kconf_fatal): the consumer
 * must stop, and a fresh process take over. */
bool payments_fatal(const struct payments *p);
/* Stop the thread: the batch under way finishes, dead letters sent are
 * waited for a moment, the offsets of what is done are committed; what
 * waits for its order is read again by the next consumer. Frees everything;
 * NULL is fine. */
void payments_stop(struct payments *p);

#endif
