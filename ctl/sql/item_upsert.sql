-- $1 item_id, $2 name, $3 stock, $4 starts_at ms, $5 ends_at ms (NULL: open),
-- $6 payment window in seconds (0: none, an order is final once persisted),
-- $7 the waiting room's opening ms (NULL: none; migration 017), $8 its
-- buckets' salts, "S0,S1,..." ('': none; migration 019). A new sale is not
-- paused (migration 018).
-- Runs inside the transaction that first locked the item row and checked it
-- has no orders.
INSERT INTO items (item_id, name, stock_total, stock_left, starts_at, ends_at, pay_within_s, queue_opens_at,
                   bucket_salts)
VALUES ($1, $2, $3, $3, to_timestamp($4::bigint / 1000.0), to_timestamp($5::bigint / 1000.0), $6,
        to_timestamp($7::bigint / 1000.0), string_to_array($8, ',')::integer[])
ON CONFLICT (item_id) DO UPDATE
   SET name = EXCLUDED.name, stock_total = EXCLUDED.stock_total, stock_left = EXCLUDED.stock_left,
       starts_at = EXCLUDED.starts_at, ends_at = EXCLUDED.ends_at, pay_within_s = EXCLUDED.pay_within_s,
       queue_opens_at = EXCLUDED.queue_opens_at, paused = false, bucket_salts = EXCLUDED.bucket_salts
