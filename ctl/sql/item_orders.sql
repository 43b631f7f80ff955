-- $1 item_id: lock the item row (if any) and count its orders.
SELECT (SELECT count(*) FROM orders WHERE item_id = $1) AS orders,
       (SELECT 1 FROM items WHERE item_id = $1 FOR UPDATE) AS exists
