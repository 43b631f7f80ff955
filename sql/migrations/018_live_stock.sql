-- Live stock changes and a paused sale (issue #57).
--
-- seckillctl item add-stock and item
-- withdraw change an item's stock during its sale. Each change has an id the
-- operator gives (or seckillctl makes and prints), and it is applied once at
-- each end under that id: here, a row of item_stock_changes written in the
-- same transaction that moves items.stock_total and items.stock_left
-- (ctl/sql/stock_change.sql); in Redis, a field of the item's changes hash
-- written by the same function call that moves its stock (seckill_ctl's
-- seckill_stock_change). So a command run again with the same id changes the
-- stock once, and reconcile can tell a change done at one end only from one
-- done at both (ctl/stockchg.h says in which order the two ends go).
--
-- units: the units added (> 0) or withdrawn (< 0). made_by: the database
-- role that made the change (an audit row: who, when, how much). The rows
-- are the item's: they go with it when it is deleted.
--
-- paused: seckillctl item pause sets it, item resume clears it; Redis holds
-- the copy the buyers' reservations read (the window hash's paused), which
-- item load and reconcile --fix restore from here.
--
-- Additive and safe to run on a live database, and again. No program's role
-- reads either but seckillctl's (the admin role, which owns the tables).
CREATE TABLE IF NOT EXISTS item_stock_changes (
    change_id text        PRIMARY KEY CHECK (change_id ~ '^[A-Za-z0-9._:-]{1,64}$'),
    item_id   bigint      NOT NULL REFERENCES items (item_id) ON DELETE CASCADE,
    units     bigint      NOT NULL CHECK (units <> 0),
    made_at   timestamptz NOT NULL DEFAULT now(),
    made_by   text        NOT NULL DEFAULT current_user
);
CREATE INDEX IF NOT EXISTS item_stock_changes_item ON item_stock_changes (item_id);

ALTER TABLE items ADD COLUMN IF NOT EXISTS paused boolean NOT NULL DEFAULT false;
