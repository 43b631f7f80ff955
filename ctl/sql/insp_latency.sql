-- $1 item id or NULL for all.
SELECT item_id, orders, p50_ms, p99_ms, max_ms
  FROM inspect_latency WHERE $1::bigint IS NULL OR item_id = $1 ORDER BY item_id
