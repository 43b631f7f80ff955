-- $1 most returns. The units Redis does not have back yet whose next try is
-- due, oldest first (order_returns_pending_idx): order id, item id, user id,
-- why it came back ('expired' or 'cancelled') and when, in ms since the
-- epoch. The return is written in the transaction that changed the order's
-- status, so its created_at is that change's now(), the order's
-- status_changed_at: the time the buyers' status call shows (seckill_mark).
-- Not locked: two consumers may send one return at once, which the Redis
-- functions make harmless (seckill_return gives back each order id once,
-- seckill_mark writes the same state again or nothing).
SELECT order_id, item_id, user_id, reason, (extract(epoch FROM created_at) * 1000)::bigint AS changed_ms
  FROM order_returns
 WHERE done_at IS NULL AND next_try_at <= now()
 ORDER BY next_try_at LIMIT $1
