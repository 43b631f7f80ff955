-- $1 item id or NULL for all.
SELECT item_id, name, stock_total, sold, stock_left, expected_left
  FROM inspect_sold WHERE $1::bigint IS NULL OR item_id = $1 ORDER BY item_id
