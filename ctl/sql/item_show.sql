-- $1 item id: its row, the window in ms since the epoch (0 for an open end),
-- and how many orders it sold and refused.
SELECT i.name, i.stock_total, i.stock_left,
       coalesce((extract(epoch FROM i.starts_at) * 1000)::bigint, 0) AS starts_ms,
       coalesce((extract(epoch FROM i.ends_at) * 1000)::bigint, 0) AS ends_ms,
       (SELECT count(*) FROM orders o WHERE o.item_id = i.item_id) AS sold,
       (SELECT count(*) FROM order_rejections r WHERE r.item_id = i.item_id) AS refused
  FROM items i WHERE i.item_id = $1
