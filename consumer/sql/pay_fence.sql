-- $1 user id, $2 the fence of the payment's hold on the user's lock (the
-- lock the workers take for the user's orders: "user:ID"). The first
-- statement of a payment's transaction, as cons_fence.sql is of a batch's:
-- records the fence unless a newer one is stored, and returns the user when
-- the payment may go ahead. No row: the lock is stale (its lease ran out and
-- a newer holder wrote since); the payment is retried under a fresh lock.
-- The row stays locked until the transaction ends, so the user's orders and
-- payments are written one transaction at a time.
INSERT INTO user_fences AS f (user_id, fence) VALUES ($1::bigint, $2::bigint)
ON CONFLICT (user_id) DO UPDATE SET fence = EXCLUDED.fence WHERE f.fence <= EXCLUDED.fence
RETURNING user_id
