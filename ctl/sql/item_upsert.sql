-- $1 item_id, $2 name, $3 stock. Runs inside the transaction that first
-- locked the item row and checked it has no orders.
INSERT INTO items (item_id, name, stock_total, stock_left)
VALUES ($1, $2, $3, $3)
ON CONFLICT (item_id) DO UPDATE
   SET name = EXCLUDED.name, stock_total = EXCLUDED.stock_total, stock_left = EXCLUDED.stock_left
