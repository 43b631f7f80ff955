-- Every item, for reconcile and item load without --item / with --all.
SELECT item_id FROM items ORDER BY item_id
