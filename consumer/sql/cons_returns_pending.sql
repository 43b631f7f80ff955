-- Returns Redis does not have yet (the metric seckill_consumer_returns_pending):
-- read from the partial index order_returns_pending_idx, which holds only them.
SELECT count(*) FROM order_returns WHERE done_at IS NULL
