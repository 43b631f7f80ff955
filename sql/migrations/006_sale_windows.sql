-- Sale windows: an item may open and close at announced times. NULL means
-- open from its creation, or until it sells out. The reservation script
-- decides with Redis's clock (TIME), never a producer's, so these are loaded
-- into Redis with the stock ('seckillctl item create', 'item load').
ALTER TABLE items
    ADD COLUMN IF NOT EXISTS starts_at timestamptz,
    ADD COLUMN IF NOT EXISTS ends_at   timestamptz;
ALTER TABLE items
    ADD CONSTRAINT items_window_order CHECK (starts_at IS NULL OR ends_at IS NULL OR starts_at < ends_at);
