-- $1 item id or NULL for all.
SELECT item_id, reason, orders, last
  FROM inspect_rejections WHERE $1::bigint IS NULL OR item_id = $1 ORDER BY item_id, reason
