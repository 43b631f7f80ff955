-- $1 item id: set stock_left from the orders. Run after recon_lock_item.sql
-- in the same transaction: the consumer takes that row lock before it
-- inserts, so the count cannot move between this read and write. Only live
-- orders hold a unit: an expired or cancelled one gave it back.
UPDATE items
   SET stock_left = stock_total - (SELECT count(*) FROM orders o
                                  WHERE o.item_id = $1 AND o.status NOT IN ('expired', 'cancelled'))
 WHERE item_id = $1
RETURNING stock_left
