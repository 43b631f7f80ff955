-- $1 order ids: Redis has their units back (or never will need them: the
-- item was gone from Redis, whose rebuild takes stock_left, which counts them).
-- The rows are locked in id order first (lk), as cons_return_later.sql
-- locks them: any consumer may send any return, and two marking
-- overlapping sets in the order their UPDATEs meet the rows could deadlock.
WITH lk AS (
    SELECT order_id FROM order_returns
     WHERE order_id = ANY ($1::bigint[]) AND done_at IS NULL
     ORDER BY order_id FOR NO KEY UPDATE
)
UPDATE order_returns AS r SET done_at = now() FROM lk WHERE r.order_id = lk.order_id
