/* paytxn: a batch of payments in one PostgreSQL transaction, each payment
 * exactly as if it were alone (issues #44, #56).
 *
 * The payments thread (payments.h) hands over a batch: up to PT_BATCH
 * payments, one per user and one per order, under their users' locks
 * (ulocks.h; a payment whose user is not locked is left as it is). One
 * transaction then:
 * 1. advances the locked users' fences (consumer/sql/cons_fence.sql, the
 *    workers' own statement: a user's orders, cancels and payments advance
 *    one fence); a stale one leaves its payment out (PT_BUSY: again under a
 *    fresh lock), the others go on;
 * 2. pays each order still pending_payment (pay_apply.sql, one conditional
 *    UPDATE for the batch): PT_DONE, applied;
 * 3. tells apart why the others paid nothing (pay_order.sql), the
 *    classification: already paid by this payment is a replay (nothing
 *    changes); expired, cancelled, final, paid by another payment or refused
 *    is late; another buyer's order is PT_REFUSE; an order nowhere is
 *    PT_UNKNOWN; one still pending (it came after step 2 looked) PT_BUSY;
 * 4. records the late payments (pay_late.sql: late_payments, once per order
 *    and reference; the order and the stock are left alone), telling a new
 *    one from a replay by the command tag;
 * 5. commits, once the leases are seen held (ul_any_lost; a lease lost
 *    during the commit is what the fences are for).
 * The statements go pipelined (pgtrip.h), a round trip only where a
 * decision waits for an answer: two when every payment pays its order (the
 * fences with BEGIN; the payments with the commit), more for the others.
 *
 * A lease lost before the commit (PT_BUSY) or a failure the server will get
 * over (the connection, a deadlock: pgtrip_class; PT_DOWN, said once while
 * it lasts) rolls the batch back: none of it is done. A statement the
 * server refuses for what it carries rolls it back too, and each locked
 * payment is applied again in a transaction of its own (still under its
 * lock), as the workers do with orders: the one the server refuses alone
 * is PT_DATA, with the server's words, the others are applied.
 *
 * Its statements (pt_stmts) go on the caller's session, whose round trips
 * it runs; its failures are said with the caller's say_pg. A struct paytxn
 * is the caller's (embedded) and belongs to its thread. */
#ifndef SECKILL_PAYTXN_H
#define SECKILL_PAYTXN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "i64map.h"
#include "log.h"
#include "paymsg.h"
#include "pgtrip.h"
#include "ulocks.h"

/* Payments applied in one transaction at most. The cost of a payment alone
 * is its round trips and its commit's WAL flush; shared by a thousand,
 * they are a small part of it, while the users' locks are still held for
 * tens of milliseconds only. bench/expiry --payments (2 consumers): 256 a
 * batch applied 11,463-12,077 payments a second, 1,024 14,195-14,642. */
#define PT_BATCH 1024

/* The statements of a batch, for the caller's session. */
#define PT_NSTMTS 4
extern const struct pgsess_stmt pt_stmts[PT_NSTMTS];

/* How one try at a payment went. */
enum pt_result {
    PT_DONE,    /* paid, a replay, or recorded late: its offset may move */
    PT_UNKNOWN, /* the order is nowhere yet: wait for it */
    PT_BUSY,    /* the user's lock is held elsewhere, or the fence was stale: again soon */
    PT_DOWN,    /* PostgreSQL or Redis failed: back off */
    PT_REFUSE,  /* never payable: dead-letter it */
    PT_DATA,    /* refused by PostgreSQL on its own (refused says why): dead-letter it */
};

/* What a committed payment did, for the metrics and Redis. */
enum pt_kind { PT_APPLIED, PT_REPLAYED, PT_LATE };

struct pt_did {
    enum pt_kind kind;
    bool mark;              /* the order is paid: tell Redis */
    int64_t item_id, at_ms; /* its item, when it was paid */
    const char *then;       /* PT_LATE: late_payments.status_then */
};

/* One payment of the batch: m the caller's (it outlives pt_run); the rest
 * pt_run's answer for a payment whose user is locked. */
struct pt_slot {
    const struct pay_msg *m;
    enum pt_result res;
    struct pt_did d; /* PT_DONE: what it did */
    char *refused;   /* PT_DATA: the server's words (freed by the next pt_run) */
};

struct paytxn {
    struct pgtrip *trip;       /* the caller's */
    struct log_repeat *say_pg; /* the caller's */
    const struct ul_batch *ul; /* the batch's locks, during pt_run */
    struct pt_slot s[PT_BATCH];
    size_t n;
    bool go[PT_BATCH];               /* still to be decided in the transaction */
    struct i64map by_user, by_order; /* a payment's slot by its user, its order */
    struct pgarr arr[5];             /* a statement's parameters */
    char err[512];                   /* the last PostgreSQL failure's words */
};

/* Ready t on the caller's trip (its session prepares pt_stmts), with the
 * caller's say_pg. 0, or -1 out of memory (pt_free frees what was had). */
int pt_init(struct paytxn *t, struct pgtrip *trip, struct log_repeat *say_pg);
void pt_free(struct paytxn *t);

/* The transaction of slots s[0..n) (their m set; n <= PT_BATCH), user i's
 * lock ul's i. Sets res (and d, refused) of the slots whose user is
 * locked; the others' are left as the caller set them. */
void pt_run(struct paytxn *t, const struct ul_batch *ul, size_t n);

#endif
