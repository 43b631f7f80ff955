-- $1 item id or NULL for all: the 20 latest minutes with orders.
SELECT minute, sum(orders) AS orders
  FROM inspect_orders_per_minute WHERE $1::bigint IS NULL OR item_id = $1
 GROUP BY minute ORDER BY minute DESC LIMIT 20
