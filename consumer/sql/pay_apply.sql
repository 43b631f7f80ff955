-- $1 order ids, $2 user ids, $3 paid_at (ms since the epoch), $4 the
-- payments' references: a batch of payments, at most one per order (and per
-- user), whose users passed their fences. Each order waiting for its payment
-- becomes paid, when and why said. Only an order still 'pending_payment'
-- changes: READ COMMITTED reads the row again once an expiry or a cancel
-- that holds it commits, so of a payment and an expiry racing for an order
-- exactly one wins. Returns the orders paid now, with their items (for
-- Redis); a payment whose order is not among them paid nothing
-- (pay_order.sql says why).
-- The status is compared as status || '' so that the planner cannot use the
-- partial index of pending orders here: with statistics older than a sale's
-- inserts it takes that index for nearly empty, scans all of it and joins
-- each row against the batch (seen after bench/drain: 2.4 ms per expired
-- order instead of 0.03). The primary key finds the batch's orders instead.
UPDATE orders AS o
   SET status = 'paid',
       status_changed_at = timestamptz 'epoch' + t.at * interval '1 millisecond',
       status_reason = 'paid ' || t.ref
  FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[]) AS t(o, u, at, ref)
 WHERE o.order_id = t.o AND o.user_id = t.u AND o.status || '' = 'pending_payment'
RETURNING o.order_id, o.item_id
