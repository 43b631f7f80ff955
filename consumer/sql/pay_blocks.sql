-- The highest order id block a producer has taken (0 when none): an order id
-- whose block is above it was never handed out. A producer takes a block in
-- a committed INSERT (producer/sql/id_block_take.sql) before it hands out an
-- id of it, so a payment for a real order never names a block this does not
-- see. Read through the primary key's index (its last entry).
SELECT coalesce(max(block), 0) FROM order_id_blocks
