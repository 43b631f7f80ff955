-- $1 item ids of the batch. Locks the item rows in id order (no deadlock
-- between batches) so the stock read here stays true until commit: the
-- consumer decides what fits instead of letting the CHECK abort the batch.
SELECT item_id, stock_left FROM items WHERE item_id = ANY ($1::bigint[]) ORDER BY item_id FOR UPDATE
