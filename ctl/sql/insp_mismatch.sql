-- $1 item id or NULL for all.
SELECT item_id, stock_total, stock_left, sold, expected_left
  FROM inspect_stock_mismatch WHERE $1::bigint IS NULL OR item_id = $1 ORDER BY item_id
