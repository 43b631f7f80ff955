-- $1 item ids of the batch. Reads their stock WITHOUT locking the rows: the
-- first guess of what fits. When every order of the batch fits in it, the
-- batch never locks the rows ahead of its insert (cons_insert.sql takes the
-- units, and the CHECK on stock_left refuses the transaction if a concurrent
-- one took them first); when something does not fit, the consumer reads
-- again under cons_items.sql's lock before refusing anything.
SELECT item_id, stock_left FROM items WHERE item_id = ANY ($1::bigint[])
