-- $1 item ids (a bigint[]): each item's stock_total, how many of its orders
-- were persisted and refused so far, and the states after the sale
-- (sql/migrations/008_order_life.sql): orders waiting for their payment,
-- paid, expired and cancelled, and the units of expired or cancelled orders
-- given back to Redis (returned) or still waiting for it. seckillctl watch
-- runs it every interval in a read-only session.
SELECT i.item_id, i.stock_total,
       (SELECT count(*) FROM orders o WHERE o.item_id = i.item_id) AS persisted,
       (SELECT count(*) FROM order_rejections r WHERE r.item_id = i.item_id) AS refused,
       s.pending_payment, s.paid, s.expired, s.cancelled,
       (SELECT count(*) FROM order_returns rt WHERE rt.item_id = i.item_id AND rt.done_at IS NOT NULL)
           AS returned,
       (SELECT count(*) FROM order_returns rt WHERE rt.item_id = i.item_id AND rt.done_at IS NULL)
           AS returns_waiting
  FROM items i
 CROSS JOIN LATERAL (
       SELECT count(*) FILTER (WHERE o.status = 'pending_payment') AS pending_payment,
              count(*) FILTER (WHERE o.status = 'paid') AS paid,
              count(*) FILTER (WHERE o.status = 'expired') AS expired,
              count(*) FILTER (WHERE o.status = 'cancelled') AS cancelled
         FROM orders o WHERE o.item_id = i.item_id) s
 WHERE i.item_id = ANY ($1::bigint[])
 ORDER BY i.item_id
