-- $1 item id: its row, the window in ms since the epoch (0 for an open end),
-- how many orders it sold (those holding a unit: an expired or cancelled one
-- gave it back to stock_left) and refused, its payment window (s, 0: none)
-- and its orders by status (sql/migrations/008_order_life.sql), with the
-- units of expired or cancelled orders Redis does not have back yet; then
-- the paid and cancelled ones (columns 11, 12); the waiting room's opening
-- (ms, 0: none; column 13, migration 017); paused (1; column 14, migration
-- 018); the buckets' salts, "S0,S1,..." ('': none; column 15, migration 019).
SELECT i.name, i.stock_total, i.stock_left,
       coalesce((extract(epoch FROM i.starts_at) * 1000)::bigint, 0) AS starts_ms,
       coalesce((extract(epoch FROM i.ends_at) * 1000)::bigint, 0) AS ends_ms,
       (SELECT count(*) FROM orders o
         WHERE o.item_id = i.item_id AND o.status IN ('final', 'pending_payment', 'paid')) AS sold,
       (SELECT count(*) FROM order_rejections r WHERE r.item_id = i.item_id) AS refused,
       i.pay_within_s,
       (SELECT count(*) FROM orders o WHERE o.item_id = i.item_id AND o.status = 'pending_payment') AS pending,
       (SELECT count(*) FROM orders o WHERE o.item_id = i.item_id AND o.status = 'expired') AS expired,
       (SELECT count(*) FROM order_returns rt WHERE rt.item_id = i.item_id AND rt.done_at IS NULL)
           AS returns_pending,
       (SELECT count(*) FROM orders o WHERE o.item_id = i.item_id AND o.status = 'paid') AS paid,
       (SELECT count(*) FROM orders o WHERE o.item_id = i.item_id AND o.status = 'cancelled') AS cancelled,
       coalesce((extract(epoch FROM i.queue_opens_at) * 1000)::bigint, 0) AS queue_opens_ms,
       i.paused::int AS paused,
       array_to_string(i.bucket_salts, ',') AS bucket_salts
  FROM items i WHERE i.item_id = $1
