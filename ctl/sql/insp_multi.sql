-- $1 item id or NULL for all.
SELECT item_id, user_id, orders
  FROM inspect_multi_orders WHERE $1::bigint IS NULL OR item_id = $1 ORDER BY item_id, user_id
