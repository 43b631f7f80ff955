-- $1 item ids of the batch. Locks the item rows in id order (no deadlock
-- between batches) so the stock read here stays true until commit: the
-- consumer decides what fits instead of letting the CHECK abort the batch.
-- Used only when the unlocked read (cons_peek.sql) says something does not
-- fit, or after the CHECK refused a batch. FOR NO KEY UPDATE is the lock an
-- UPDATE of stock_left takes itself: it keeps other writers of the stock out
-- but not the foreign-key checks of concurrent inserts into orders.
SELECT item_id, stock_left FROM items WHERE item_id = ANY ($1::bigint[]) ORDER BY item_id FOR NO KEY UPDATE
