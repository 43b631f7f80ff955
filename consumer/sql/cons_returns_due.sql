-- $1 most returns. The units Redis does not have back yet whose next try is
-- due, oldest first (order_returns_pending_idx): order id, item id, user id.
-- Not locked: two consumers may send one return at once, which the Redis
-- function makes harmless (it gives back each order id once).
SELECT order_id, item_id, user_id FROM order_returns
 WHERE done_at IS NULL AND next_try_at <= now()
 ORDER BY next_try_at LIMIT $1
