-- $1 most orders to expire, $2 milliseconds until a retry pass may send
-- their returns (the caller sends them first). Expires the orders whose
-- payment window is past, gives their units back to the items' stock_left
-- and records each return for Redis (order_returns), all in one statement
-- of one transaction: the three can never be seen apart, and a crash leaves
-- all or none.
-- Any number of consumers run this at once: due takes the rows it locks and
-- skips those another one holds (SKIP LOCKED), so two passes never wait for
-- each other nor take the same order; the UPDATE checks the status again
-- (READ COMMITTED re-reads a row changed since the snapshot), so an order a
-- payment or a cancel decided first is left alone: of two racing outcomes
-- exactly one wins. The partial index orders_pay_by_pending_idx holds only
-- orders still pending, by pay_by: a pass reads the due ones from its front.
-- Item rows are locked in id order (lk), as cons_insert.sql locks them, so
-- an expiry and a batch of inserts cannot deadlock. Returns the orders
-- expired as cons_returns_due.sql returns the returns due (order id, item
-- id, user id, 'expired', when in ms since the epoch): the caller gives
-- their units back to Redis at once; a retry pass of any consumer sends a
-- return only once $2 has passed without it being marked done.
-- The UPDATE finds the locked orders by their ids (an array, so the primary
-- key) and compares the status as status || '' so that the planner cannot
-- use the partial index of pending orders there: with statistics older than
-- a sale's inserts it takes that index for nearly empty, scans all of it
-- and joins each row against the batch (seen after bench/drain: 2.4 ms per
-- expired order instead of 0.03).
WITH due AS (
    SELECT order_id FROM orders
     WHERE status = 'pending_payment' AND pay_by < now()
     ORDER BY pay_by LIMIT $1
       FOR UPDATE SKIP LOCKED
), exp AS (
    UPDATE orders AS o
       SET status = 'expired', status_changed_at = now(), status_reason = 'not paid within the window'
     WHERE o.order_id = ANY (ARRAY(SELECT order_id FROM due)) AND o.status || '' = 'pending_payment'
    RETURNING o.order_id, o.item_id, o.user_id
), d AS (
    SELECT item_id, count(*)::integer AS n FROM exp GROUP BY item_id
), lk AS (
    SELECT it.item_id FROM items AS it WHERE it.item_id IN (SELECT item_id FROM d)
     ORDER BY it.item_id FOR NO KEY UPDATE
), upd AS (
    UPDATE items AS it SET stock_left = it.stock_left + d.n
      FROM d JOIN lk USING (item_id)
     WHERE it.item_id = d.item_id
), ret AS (
    INSERT INTO order_returns (order_id, item_id, user_id, reason, next_try_at)
    SELECT order_id, item_id, user_id, 'expired', now() + $2::bigint * interval '1 millisecond' FROM exp
)
SELECT order_id, item_id, user_id, 'expired' AS reason, (extract(epoch FROM now()) * 1000)::bigint AS changed_ms
  FROM exp
