-- $1 order ids: Redis has their units back (or never will need them: the
-- item was gone from Redis, whose rebuild takes stock_left, which counts them).
UPDATE order_returns SET done_at = now() WHERE order_id = ANY ($1::bigint[]) AND done_at IS NULL
