-- $1 item ids (a bigint[]): each item's stock_total and how many of its
-- orders were persisted and refused so far. seckillctl watch runs it every
-- interval in a read-only session.
SELECT i.item_id, i.stock_total,
       (SELECT count(*) FROM orders o WHERE o.item_id = i.item_id) AS persisted,
       (SELECT count(*) FROM order_rejections r WHERE r.item_id = i.item_id) AS refused
  FROM items i
 WHERE i.item_id = ANY ($1::bigint[])
 ORDER BY i.item_id
