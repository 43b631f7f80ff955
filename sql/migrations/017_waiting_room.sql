-- A waiting room per item (issue #58): seckillctl item create ...
-- --queue-opens-at T gives an item a queue that opens at T, before its sale
-- (starts_at, which such an item must have). Buyers join it from T; at
-- starts_at the ones who joined are shuffled, and the producers admit the
-- line at the rate the sale holds (producer/wroom.h, producer/admitter.h).
-- NULL: no waiting room, the item sells as before.
--
-- The queue itself lives in Redis, under the item's hash tag, with the
-- window's copy of this time (the window hash's queue_opens_ms, written by
-- item create, item load and reconcile --fix); the database keeps what an
-- item load needs to restore it after a Redis loss.
--
-- Additive and safe to run on a live database, and again: a nullable column
-- and a check. No program's role reads it but seckillctl's (the admin role,
-- which owns the table).
ALTER TABLE items ADD COLUMN IF NOT EXISTS queue_opens_at timestamptz;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conname = 'items_queue_before_sale' AND conrelid = 'items'::regclass) THEN
        ALTER TABLE items ADD CONSTRAINT items_queue_before_sale
            CHECK (queue_opens_at IS NULL OR (starts_at IS NOT NULL AND queue_opens_at < starts_at));
    END IF;
END
$$;
