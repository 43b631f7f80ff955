-- $1 order ids, $2 user ids, $3 item ids: the buyers' cancels of a batch
-- (issue #44). Cancels each order still pending payment whose id, buyer and
-- item all match, gives its unit back to the item's stock_left and records
-- the return for Redis (order_returns, reason 'cancelled'; consumer/expiry.c
-- sends it), in one statement: the three commit together or not at all.
-- Anything else is left as it is: an order paid, expired, cancelled already
-- or final, one of another buyer or item, one that does not exist. So a
-- cancel delivered twice, replayed, or racing the expiry or a payment
-- changes the order once: the UPDATE checks the status again on the row it
-- locks (READ COMMITTED re-reads a row changed since the snapshot), and
-- order_returns is keyed by the order. Runs after the batch's insert, in its
-- transaction: a cancel sees the order the same batch inserted before it.
-- Item rows are locked in id order (lk), as cons_insert.sql and
-- cons_expire.sql lock them. Returns the order ids cancelled.
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
), d AS (
    SELECT item_id, count(*)::integer AS n FROM can GROUP BY item_id
), lk AS (
    SELECT it.item_id FROM items AS it WHERE it.item_id IN (SELECT item_id FROM d)
     ORDER BY it.item_id FOR NO KEY UPDATE
), upd AS (
    UPDATE items AS it SET stock_left = it.stock_left + d.n
      FROM d JOIN lk USING (item_id)
     WHERE it.item_id = d.item_id
), ret AS (
    INSERT INTO order_returns (order_id, item_id, user_id, reason)
    SELECT order_id, item_id, user_id, 'cancelled' FROM can
)
SELECT order_id FROM can
