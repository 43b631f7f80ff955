-- $1 item id: forget its stock changes (migration 018) when item create
-- starts a new sale of it, which it does only for an item without orders.
DELETE FROM item_stock_changes WHERE item_id = $1
