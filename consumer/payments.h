/* payments: the shop's payments move orders from pending_payment to paid,
 * each exactly once (issue #44).
 *
 * A thread of the consumer's own, with a Kafka consumer loop of its own on
 * kafka.payments_topic (kloop.h; group <consumer.group_id>.payments), its
 * own lock client, PostgreSQL and Redis connections, made and remade with
 * backoff. A payment message is paymsg.h's, keyed by the user id and
 * signed by the payment service (paysig.h). Steps 0 and 1 and the waiting
 * set are paywait.h's, step 3's transaction paytxn.h's; this module picks
 * the batches, runs them (locks, transaction, marks) and decides what
 * becomes of each payment after its try (done, late, dead-lettered,
 * waiting again, again soon, or held back). A payment fetched goes through:
 *
 * 0. The message: a malformed one (bad JSON, another version, a key that
 *    is not its user), one no payment key signed (no "sig", an unknown key
 *    id, a MAC that does not match: counted as payments_unsigned) and one
 *    for an order id no producer could have issued (its block, order.h, 0 or
 *    above the highest order_id_blocks holds, read again when a payment
 *    names a higher one: payments_never_issued) go to the dead-letter topic
 *    at once, with their reason, their offsets stored once the broker has
 *    the letter. They never change an order nor write late_payments.
 * 1. The look-up, without a lock: once per turn, one statement per 1,024
 *    (pay_waiting.sql) looks for the orders of the payments fetched and of
 *    the waiting ones due. A payment whose order is there (or was refused
 *    for its buyer) is ready; one whose order is not waits, looked for
 *    again after 50 ms doubling to 1 s, up to consumer.payment_wait_ms from
 *    when it was fetched, then goes to the dead-letter topic ("order
 *    unknown"). When an order is found, every payment waiting for it is
 *    ready, in the order they came. Waiting payments take no lock, write no
 *    fence and share no batch: however many wait, a payment for a persisted
 *    order is applied in the turn after it is fetched.
 * 2. The ready payments are applied in batches of up to 1,024 (PT_BATCH,
 *    paytxn.h), each payment exactly as if it were alone. A batch holds
 *    one payment per user, taken in arrival order: a user's ready payments
 *    apply in the order they came, and a second payment of an order never
 *    overtakes the first.
 * 3. Under the users' locks (the workers' own, "user:ID": ulocks.h), taken in
 *    one round trip; a user whose lock is held elsewhere has their payment
 *    tried again soon, the others go on. One transaction for the batch:
 *    advance the users' fences (consumer/sql/cons_fence.sql, the workers'
 *    own statement; a stale one has its payment retried under a fresh lock,
 *    the others go on), then pay each order still pending_payment
 *    (pay_apply.sql, one conditional UPDATE for the batch). A payment that
 *    paid nothing is told apart (pay_order.sql): already paid by this
 *    payment is a replay (nothing changes); expired, cancelled, final, paid
 *    by another payment or refused records a late payment (pay_late.sql:
 *    late_payments, once per order and reference) and leaves the order and
 *    the stock alone; another buyer's order is dead-lettered. One commit.
 *    The statements go pipelined (common/pg/pgtrip.h), a round trip only
 *    where a decision waits for an answer: BEGIN with the fences, the
 *    payments, then the commit when every order was paid (why the others
 *    were not, and their late payments, a round trip each before it). A
 *    lease lost before the commit, or a failure the server will get over
 *    (the connection, a deadlock: pgtrip_class), rolls the batch back: all
 *    of it is tried again, after the backoff. A statement the server
 *    refuses for what it carries rolls the batch back too, and its
 *    payments are applied again one per transaction (still under their
 *    locks), as the workers do with orders: the payment the server refuses
 *    alone goes to the dead-letter topic with the server's words, the
 *    others are applied.
 * 4. After the commit, the orders paid become 'p' in their items' orders
 *    hashes (seckill_mark, the buyers' status calls) in one pipelined round
 *    trip, best effort: PostgreSQL decides, a failure is logged once per
 *    state change and counted. Then the locks are released, in one round
 *    trip.
 * 5. Only then are the messages' offsets stored (never past a payment not
 *    done), so a crash loses none, and a replay changes nothing.
 *
 * What bounds what is held. The payments fetched and not looked up yet,
 * and the ready ones held back while PostgreSQL or Redis is down (retried
 * with backoff, said once per state change), count towards PAY_HELD_MAX
 * (10,000): past it, fetching pauses. The waiting payments do not: they
 * have a bound of their own, consumer.payment_wait_max payments (50,000 by
 * default) and PW_WAIT_BYTES_MAX (64 MiB of payments, messages and keys).
 * Past either, the payment that has waited longest goes to the dead-letter
 * topic ("waiting set full", counted as payments_wait_full and alerted):
 * nothing is dropped unsaid; every waiting payment ends applied, late, or
 * dead-lettered with its reason. A waiting payment's offset is not stored,
 * so it holds its partition's committed offset back: a consumer that
 * restarts (or a partition that moves) reads it, and every message after
 * it, again; those already applied are replays and change nothing, and the
 * waiting ones wait again, consumer.payment_wait_ms from then.
 *
 * The look-up of step 1 and the read of the highest block carry no payment's
 * words, only ids: a refusal there is the schema's (a migration missing),
 * not a payment's, and is said and waited out with the backoff like
 * PostgreSQL down.
 *
 * Said once per state change: the wait ("order N of payment R is not in
 * PostgreSQL yet", then "over" once none waits), PostgreSQL and Redis
 * failures; late payments and dead letters in one line per period at most
 * (10 s, 1 s), with how many came since.
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
