-- $1 most windows to look at, $2 milliseconds until a retry pass may send
-- the returns (the caller sends them first). Expires the orders whose
-- payment window is past, gives their units back to the items' stock_left
-- and records each return for Redis (order_returns: units_back,
-- sql/migrations/016_units_back.sql), all in one statement of one
-- transaction: the three can never be seen apart, and a crash leaves all or
-- none.
-- The windows come from order_deadlines (sql/migrations/012_payment_cost.sql),
-- earliest first from its pay_by index: a pass reads only the few that are
-- due, and drops them (gone). A deadline's order may have been paid or
-- cancelled meanwhile (those leave their deadline alone): the pass drops
-- the deadline and leaves such an order as it is; so it does with one
-- whose order is gone (an operator deleted it), which left there would
-- stop the expiry once a batch's worth of them sat at the front.
-- Any number of consumers run this at once: cand takes the deadlines it
-- locks and skips those another pass holds (SKIP LOCKED), so two passes
-- never wait for each other nor take the same order. The UPDATE waits for
-- an order a payment or a cancel holds right now, then checks the status
-- again (READ COMMITTED reads the row anew), so an order a payment or a
-- cancel decided first is left alone: of two racing outcomes exactly one
-- wins. (Locking the orders first with SKIP LOCKED, as the first version
-- did, cost a WAL record per order for nothing: passes never share an
-- order, their deadlines keep them apart.) Only an expiry pass ever locks
-- a deadline, so nothing that holds an item row waits for one.
-- units_back locks the item rows in id order, as cons_insert.sql locks them,
-- so an expiry and a batch of inserts cannot deadlock. Returns the orders
-- expired as cons_returns_due.sql returns the returns due (order id, item
-- id, user id, 'expired', when in ms since the epoch), then how many
-- deadlines the pass removed (a full pass means more may be due; paid ones
-- are taken but not expired); when none expired, one row of NULLs with that
-- count. The caller gives the units back to Redis at once; a retry pass of
-- any consumer sends a return only once $2 has passed without it being
-- marked done.
-- The UPDATE compares the status as status || '' so that the planner cannot
-- pick an index on status should one be added (the partial index of pending
-- orders this replaces was taken for nearly empty with statistics older than
-- a sale's inserts: 2.4 ms per expired order instead of 0.03).
WITH cand AS (
    SELECT order_id FROM order_deadlines
     WHERE pay_by < now()
     ORDER BY pay_by LIMIT $1
       FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM order_deadlines AS dl
     WHERE dl.order_id = ANY (ARRAY(SELECT order_id FROM cand))
    RETURNING dl.order_id
), exp AS (
    UPDATE orders AS o
       SET status = 'expired', status_changed_at = now(), status_reason = 'not paid within the window'
     WHERE o.order_id = ANY (ARRAY(SELECT order_id FROM cand)) AND o.status || '' = 'pending_payment'
    RETURNING o.order_id, o.item_id, o.user_id
), back AS (
    SELECT units_back(array_agg(order_id), array_agg(item_id), array_agg(user_id), 'expired', $2::bigint) AS n
      FROM exp
)
SELECT e.order_id, e.item_id, e.user_id, CASE WHEN e.order_id IS NOT NULL THEN 'expired' END AS reason,
       CASE WHEN e.order_id IS NOT NULL THEN (extract(epoch FROM now()) * 1000)::bigint END AS changed_ms,
       (SELECT count(*) FROM gone) AS taken
  FROM (SELECT 1) AS one CROSS JOIN back LEFT JOIN exp AS e ON true
