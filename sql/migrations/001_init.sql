-- Items on sale and the orders persisted for them.
--
-- The database is the final authority on the invariants: an order never
-- drives stock below zero (CHECK), a user holds at most one order per item
-- (UNIQUE), and replaying an order changes nothing (primary key on order_id,
-- inserts use ON CONFLICT DO NOTHING).

CREATE TABLE IF NOT EXISTS items (
    item_id      bigint      PRIMARY KEY CHECK (item_id > 0),
    name         text        NOT NULL DEFAULT '',
    stock_total  integer     NOT NULL CHECK (stock_total >= 0),
    stock_left   integer     NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT items_stock_left_range CHECK (stock_left >= 0 AND stock_left <= stock_total)
);

CREATE TABLE IF NOT EXISTS orders (
    order_id      bigint      PRIMARY KEY,
    user_id       bigint      NOT NULL CHECK (user_id > 0),
    item_id       bigint      NOT NULL REFERENCES items (item_id),
    qty           integer     NOT NULL DEFAULT 1 CHECK (qty = 1),
    reserved_at   timestamptz NOT NULL,
    persisted_at  timestamptz NOT NULL DEFAULT now(),
    fence         bigint      NOT NULL,
    CONSTRAINT orders_one_per_user UNIQUE (user_id, item_id)
);
CREATE INDEX IF NOT EXISTS orders_item_idx ON orders (item_id);

-- Fence check for the per-user lock: the consumer's insert transaction
-- advances the user's fence and aborts when its own fence is not newer than
-- the stored one, so a lock holder whose lease expired cannot write.
CREATE TABLE IF NOT EXISTS user_fences (
    user_id  bigint PRIMARY KEY,
    fence    bigint NOT NULL
);

-- The same check for any named lock (seckillctl lock run and its users).
CREATE TABLE IF NOT EXISTS lock_fences (
    lock_name  text   PRIMARY KEY,
    fence      bigint NOT NULL
);
