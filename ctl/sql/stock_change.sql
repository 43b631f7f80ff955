-- $1 change id, $2 item id, $3 units (> 0 added, < 0 withdrawn): move the
-- item's stock_total and stock_left by $3 and write the change's audit row
-- (migration 018), once per change id. The item's row is locked first, as
-- the consumer locks it before it counts an order against stock_left.
-- Withdrawing more than stock_left is refused by items_stock_left_range
-- (an error): the units withdrawn come out of Redis first, where only units
-- no one holds are, so that cannot happen but by a mistake.
-- One row: applied (1 now, 0 not), the item (1 it exists, 0 not), and the
-- item and units the id was recorded with before (NULL: a new id).
WITH prior AS (
    SELECT item_id, units FROM item_stock_changes WHERE change_id = $1::text
), item AS (
    SELECT item_id FROM items WHERE item_id = $2::bigint FOR UPDATE
), ins AS (
    INSERT INTO item_stock_changes (change_id, item_id, units)
    SELECT $1::text, item_id, $3::bigint FROM item WHERE NOT EXISTS (SELECT 1 FROM prior)
    RETURNING units
), upd AS (
    UPDATE items SET stock_total = stock_total + ins.units, stock_left = stock_left + ins.units
      FROM ins WHERE items.item_id = $2::bigint
    RETURNING items.item_id
)
SELECT (SELECT count(*) FROM upd) AS applied, (SELECT count(*) FROM item) AS item_exists,
       (SELECT item_id FROM prior) AS prior_item, (SELECT units FROM prior) AS prior_units
