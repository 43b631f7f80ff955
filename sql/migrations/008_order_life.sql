-- An order's life after the sale (issue #44): an item may give its buyers a
-- payment window; an order of such an item is 'pending_payment' until it is
-- paid, cancelled or expired, and an expired (or cancelled) order gives its
-- unit back, in PostgreSQL in the same transaction and then to Redis from a
-- durable record (order_returns), once.
--
-- Additive and safe to run on a live database: new columns with constant
-- defaults (no table rewrite), a new table, new indexes. The one change of an
-- existing object is the one-per-user key, which must no longer count an
-- order that gave its unit back (its buyer may buy again); it keeps its name,
-- so the consumer's error handling, which looks for it, is unchanged.
-- (the DROP ... IF EXISTS below would say "does not exist" the first time)
SET client_min_messages = warning;
\if :{?consumer_role}
\else
\set consumer_role consumer
\endif

-- Seconds a buyer has to pay; 0: no payment step, an order is final once
-- persisted (as before this migration).
ALTER TABLE items ADD COLUMN IF NOT EXISTS pay_within_s integer NOT NULL DEFAULT 0;
ALTER TABLE items DROP CONSTRAINT IF EXISTS items_pay_within_range;
ALTER TABLE items ADD CONSTRAINT items_pay_within_range CHECK (pay_within_s >= 0);

-- status: 'final' for an order of an item without a payment window. Not
-- NULL: every reader filters on status with plain equality (NULL would make
-- "status <> 'expired'" silently drop those rows), and 'final' says what such
-- an order is, rather than that something is missing. Rows persisted before
-- this migration are 'final': they had no payment step.
-- pay_by: the end of the payment window (NULL for 'final'); status_changed_at
-- and status_reason: when and why the status last changed (NULL until then).
ALTER TABLE orders
    ADD COLUMN IF NOT EXISTS status            text        NOT NULL DEFAULT 'final',
    ADD COLUMN IF NOT EXISTS pay_by            timestamptz,
    ADD COLUMN IF NOT EXISTS status_changed_at timestamptz,
    ADD COLUMN IF NOT EXISTS status_reason     text;
ALTER TABLE orders DROP CONSTRAINT IF EXISTS orders_status_known;
ALTER TABLE orders ADD CONSTRAINT orders_status_known
    CHECK (status IN ('final', 'pending_payment', 'paid', 'cancelled', 'expired'));
ALTER TABLE orders DROP CONSTRAINT IF EXISTS orders_pending_has_pay_by;
ALTER TABLE orders ADD CONSTRAINT orders_pending_has_pay_by
    CHECK (status <> 'pending_payment' OR pay_by IS NOT NULL);

-- The expiry's index: only the orders still waiting for a payment, by the
-- end of their window. A pass reads the few that are due from its front,
-- never the whole table; a paid or expired order leaves it.
CREATE INDEX IF NOT EXISTS orders_pay_by_pending_idx ON orders (pay_by) WHERE status = 'pending_payment';

-- One live order per user and item: an expired or cancelled order no longer
-- holds the buyer's place (sale.rebuy_after_cancel decides in Redis whether
-- the buyer may come back). The same name as the constraint it replaces.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'orders_one_per_user') THEN
        ALTER TABLE orders DROP CONSTRAINT orders_one_per_user;
    END IF;
END $$;
CREATE UNIQUE INDEX IF NOT EXISTS orders_one_per_user ON orders (user_id, item_id)
    WHERE status NOT IN ('expired', 'cancelled');

-- The units to give back to Redis: written in the transaction that expires
-- (or cancels) the order, marked done once Redis has the unit. Keyed by the
-- order, so an order can be returned once only; a row not done is retried,
-- after a consumer restart too.
CREATE TABLE IF NOT EXISTS order_returns (
    order_id    bigint      PRIMARY KEY REFERENCES orders (order_id),
    item_id     bigint      NOT NULL,
    user_id     bigint      NOT NULL,
    reason      text        NOT NULL CHECK (reason IN ('expired', 'cancelled')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    tries       integer     NOT NULL DEFAULT 0,
    next_try_at timestamptz NOT NULL DEFAULT now(),
    done_at     timestamptz
);
-- The retry's index: only the returns Redis does not have yet.
CREATE INDEX IF NOT EXISTS order_returns_pending_idx ON order_returns (next_try_at) WHERE done_at IS NULL;

-- The consumer (consumer/sql/cons_*.sql), least privilege as in 007:
--   cons_insert    reads the item's window, writes the new order's status and pay_by
GRANT SELECT (pay_within_s) ON items TO :"consumer_role";
GRANT INSERT (status, pay_by) ON orders TO :"consumer_role";
--   cons_existing  a user's live order (status); cons_expire the due orders
GRANT SELECT (status, pay_by) ON orders TO :"consumer_role";
GRANT UPDATE (status, status_changed_at, status_reason) ON orders TO :"consumer_role";
--   cons_expire    records each return; cons_returns_due, cons_return_done,
--                  cons_return_later read and mark them
GRANT SELECT (order_id, item_id, user_id, done_at, next_try_at, tries),
      INSERT (order_id, item_id, user_id, reason),
      UPDATE (done_at, tries, next_try_at) ON order_returns TO :"consumer_role";
