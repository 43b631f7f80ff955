-- $1 item id: lock its row for a repair.
SELECT stock_total FROM items WHERE item_id = $1 FOR UPDATE
