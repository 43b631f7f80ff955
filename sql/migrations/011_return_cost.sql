-- What a return costs PostgreSQL (issue #44, item 8): two changes to
-- order_returns, measured with EXPLAIN ANALYZE on a batch of 1,000 expiries
-- (bench/expiry's item):
--
-- 1. No foreign key to orders. The key's trigger ran a locking lookup of the
--    order for each row inserted: 6-10 ms of the statement's 21-35 ms. Every
--    row is inserted by the statement that changes its order's status
--    (consumer/sql/cons_expire.sql, cons_cancel.sql), from that statement's
--    own RETURNING, so the order exists and is locked by then; and an order
--    is never deleted (the consumer has no DELETE on orders). The key
--    checked a fact the writers already make true.
-- 2. The consumer may set next_try_at when it records a return. The expiry
--    gives back the units of the orders it just expired itself, from the
--    expiring statement's rows; a return's first retry is due a few seconds
--    later (consumer/deadline.c), so the other consumers' retry passes do not
--    send it too while it is on its way (they did: 83,000 sent for 50,000).
--
-- Idempotent and safe on a live database.
SET client_min_messages = warning;
\if :{?consumer_role}
\else
\set consumer_role consumer
\endif

ALTER TABLE order_returns DROP CONSTRAINT IF EXISTS order_returns_order_id_fkey;

GRANT INSERT (next_try_at) ON order_returns TO :"consumer_role";
