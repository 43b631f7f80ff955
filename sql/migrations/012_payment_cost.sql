-- What a payment costs PostgreSQL (issue #44, item 8): a payment changes no
-- indexed column, so PostgreSQL can write the paid row as a HOT update (the
-- new version on the same page, no index entry added).
--
-- Before this migration a payment changed orders.status, which two partial
-- indexes name in their predicates (orders_one_per_user and
-- orders_pay_by_pending_idx). Every payment then wrote the row to a new
-- place and an entry into each of the table's three other indexes: 5 WAL
-- records and 32-35 us of PostgreSQL per payment (EXPLAIN (ANALYZE, WAL),
-- 1,000 of 100,000 pending orders, a quiet machine), 38 us in bench/expiry.
-- Three changes:
--
-- 1. holds_unit: whether the order holds its unit (not expired, not
--    cancelled), a column PostgreSQL computes from status. The one-per-user
--    key is on it: a payment leaves it true, so it does not touch that key.
--    Same name as before (the consumer looks for it in its errors).
-- 2. order_deadlines: the end of each window, in a table of its own, in
--    place of orders_pay_by_pending_idx. A row per order of an item with a
--    payment window, written with the order (consumer/sql/cons_insert.sql)
--    and removed by the expiry when the window ends (cons_expire.sql): it
--    expires the order if it is still pending, and only drops the row if
--    the order was paid or cancelled meanwhile. Payments and cancels leave
--    the row alone: deleting it there would cost each payment a write, and
--    would make a cancel (whose transaction holds item rows) wait for an
--    expiry pass that waits for those item rows.
-- 3. fillfactor 90 on orders: room on each page for the paid version of
--    its rows (new pages only; a VACUUM FULL or CLUSTER repacks old ones).
--
-- Adding a stored computed column rewrites orders under an exclusive lock:
-- run it between sales. The consumers must be stopped while it runs and
-- upgraded with it: an older consumer does not write order_deadlines, so
-- the orders it persisted afterwards would never expire.
SET client_min_messages = warning;
\if :{?consumer_role}
\else
\set consumer_role consumer
\endif

ALTER TABLE orders ADD COLUMN IF NOT EXISTS holds_unit boolean
    GENERATED ALWAYS AS (status NOT IN ('expired', 'cancelled')) STORED;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_indexes
                    WHERE indexname = 'orders_one_per_user' AND indexdef LIKE '%holds_unit%') THEN
        CREATE UNIQUE INDEX orders_one_per_user_012 ON orders (user_id, item_id) WHERE holds_unit;
        DROP INDEX orders_one_per_user;
        ALTER INDEX orders_one_per_user_012 RENAME TO orders_one_per_user;
    END IF;
END $$;

CREATE TABLE IF NOT EXISTS order_deadlines (
    order_id bigint      PRIMARY KEY,
    pay_by   timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS order_deadlines_pay_by_idx ON order_deadlines (pay_by);
INSERT INTO order_deadlines (order_id, pay_by)
SELECT order_id, pay_by FROM orders WHERE status = 'pending_payment'
ON CONFLICT (order_id) DO NOTHING;
DROP INDEX IF EXISTS orders_pay_by_pending_idx;

ALTER TABLE orders SET (fillfactor = 90);

-- The consumer, least privilege as in 007: cons_existing finds a user's
-- live order by holds_unit (the key's predicate, so the key serves it);
-- cons_insert writes the deadlines, cons_expire reads, locks (FOR UPDATE
-- needs an UPDATE right; nothing updates a deadline) and removes them.
GRANT SELECT (holds_unit) ON orders TO :"consumer_role";
GRANT SELECT (order_id, pay_by), INSERT (order_id, pay_by), UPDATE (pay_by), DELETE
    ON order_deadlines TO :"consumer_role";
REVOKE ALL ON order_deadlines FROM PUBLIC;
