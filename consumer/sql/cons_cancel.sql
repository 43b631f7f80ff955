-- $1 order ids, $2 user ids, $3 item ids: the buyers' cancels of a batch
-- (issue #44). Cancels each order still pending payment whose id, buyer and
-- item all match, gives its unit back to the item's stock_left and records
-- the return for Redis (order_returns, reason 'cancelled'; the returns
-- outbox, consumer/outbox.c, sends it): units_back
-- (sql/migrations/016_units_back.sql), in the same statement, so the three
-- commit together or not at all.
-- Anything else is left as it is: an order paid, expired, cancelled already
-- or final, one of another buyer or item, one that does not exist. So a
-- cancel delivered twice, replayed, or racing the expiry or a payment
-- changes the order once: the UPDATE checks the status again on the row it
-- locks (READ COMMITTED re-reads a row changed since the snapshot), and
-- order_returns is keyed by the order. Runs after the batch's insert, in its
-- transaction: a cancel sees the order the same batch inserted before it.
-- units_back locks the item rows in id order, as cons_insert.sql locks them
-- (and the expiry, through units_back too). Returns the order ids
-- cancelled.
-- The orders are found by their primary key ("o.order_id = ANY ($1)"), not
-- by a hash of every order of the table, which the planner otherwise takes
-- for the join against the batch (pay_apply.sql says more). The status is
-- compared as status || '' so that no index on status is ever taken here.
WITH t AS (
    SELECT DISTINCT o, u, i FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS t(o, u, i)
), can AS (
    UPDATE orders AS o
       SET status = 'cancelled', status_changed_at = now(), status_reason = 'cancelled by its buyer'
      FROM t
     WHERE o.order_id = ANY ($1::bigint[]) AND o.order_id = t.o AND o.user_id = t.u AND o.item_id = t.i
       AND o.status || '' = 'pending_payment'
    RETURNING o.order_id, o.item_id, o.user_id
), back AS (
    SELECT units_back(array_agg(order_id), array_agg(item_id), array_agg(user_id), 'cancelled', 0) AS n
      FROM can
)
SELECT can.order_id FROM can CROSS JOIN back
