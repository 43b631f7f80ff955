-- $1 item id: the stock changes recorded for it (migration 018), oldest
-- first: change id, units (> 0 added, < 0 withdrawn). For reconcile, which
-- compares them with Redis' record, and item load, which restores that.
SELECT change_id, units FROM item_stock_changes WHERE item_id = $1 ORDER BY made_at, change_id
