-- $1 item id: its stock, what is sold, the users holding two orders, its
-- sale window in ms since the epoch (0 for an open end) and its payment
-- window (s, 0: none), and its waiting room's opening (ms, 0: none;
-- migration 017), and whether it is paused (1; migration 018). Sold counts
-- the live orders: an expired or cancelled one gave its unit back to stock_left
-- (sql/migrations/008_order_life.sql).
SELECT i.stock_total, i.stock_left,
       (SELECT count(*) FROM orders o
         WHERE o.item_id = i.item_id AND o.status NOT IN ('expired', 'cancelled')) AS sold,
       (SELECT count(*) FROM (SELECT 1 FROM orders o
                               WHERE o.item_id = i.item_id AND o.status NOT IN ('expired', 'cancelled')
                               GROUP BY o.user_id HAVING count(*) > 1) d) AS dup_users,
       coalesce((extract(epoch FROM i.starts_at) * 1000)::bigint, 0) AS starts_ms,
       coalesce((extract(epoch FROM i.ends_at) * 1000)::bigint, 0) AS ends_ms,
       i.pay_within_s,
       coalesce((extract(epoch FROM i.queue_opens_at) * 1000)::bigint, 0) AS queue_opens_ms,
       i.paused::int AS paused
  FROM items i WHERE i.item_id = $1
