-- Orders the consumer refused to persist, and why. Every message either lands
-- in orders, here, or in the dead-letter topic: nothing is dropped silently.
-- A replay records the same refusal once (the primary key), so counting rows
-- here stays meaningful.
--   no_item       the item does not exist
--   no_stock      inserting it would drive stock_left below zero
--   id_conflict   the order id exists with another user or item (alert: ids collide)
--   dup_buyer     the user already holds another order for this item
CREATE TABLE IF NOT EXISTS order_rejections (
    order_id     bigint      NOT NULL,
    user_id      bigint      NOT NULL,
    item_id      bigint      NOT NULL,
    reason       text        NOT NULL CHECK (reason IN ('no_item', 'no_stock', 'id_conflict', 'dup_buyer')),
    reserved_at  timestamptz NOT NULL,
    rejected_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (order_id, user_id, item_id)
);
CREATE INDEX IF NOT EXISTS order_rejections_item_idx ON order_rejections (item_id);
