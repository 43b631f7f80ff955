-- $1 item id: the stock changes recorded for it (migration 018), oldest
-- first: change id, units (> 0 added, < 0 withdrawn), when (ms since the
-- epoch) and by which role. For reconcile, which compares them with Redis'
-- record, item load, which restores that, and item show.
SELECT change_id, units, (extract(epoch FROM made_at) * 1000)::bigint AS made_ms, made_by
  FROM item_stock_changes WHERE item_id = $1 ORDER BY made_at, change_id
