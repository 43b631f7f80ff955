-- $1 order ids, $2 user ids, $3 paid_at (ms since the epoch), $4 the
-- payments' references: a batch of payments, at most one per order (and per
-- user), whose users passed their fences. Each order waiting for its payment
-- becomes paid, when and why said. Only an order still 'pending_payment'
-- changes: READ COMMITTED reads the row again once an expiry or a cancel
-- that holds it commits, so of a payment and an expiry racing for an order
-- exactly one wins. Returns the orders paid now, with their items (for
-- Redis); a payment whose order is not among them paid nothing
-- (pay_order.sql says why).
-- The orders are found by their primary key: "o.order_id = ANY ($1)" lets
-- the planner read just the batch's rows from it. Without it, the planner
-- took the join against the batch for one with a few hundred orders and
-- read and hashed every order of the table for each batch (auto_explain in
-- bench/expiry --payments: 81,568 rows hashed for 1,024 payments, 33-40 us
-- of a payment's 35-40 us of PostgreSQL). The status is compared as
-- status || '' so that no index on status (there was one of pending orders
-- before sql/migrations/012) is ever taken for the batch's rows.
UPDATE orders AS o
   SET status = 'paid',
       status_changed_at = timestamptz 'epoch' + t.at * interval '1 millisecond',
       status_reason = 'paid ' || t.ref
  FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[]) AS t(o, u, at, ref)
 WHERE o.order_id = ANY ($1::bigint[]) AND o.order_id = t.o AND o.user_id = t.u
   AND o.status || '' = 'pending_payment'
RETURNING o.order_id, o.item_id
