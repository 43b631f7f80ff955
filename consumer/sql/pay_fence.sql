-- $1 user ids, $2 the fence of each one's hold on the user's lock (the lock
-- the workers take for the user's orders: "user:ID"): the users of a batch
-- of payments, one payment each. The first statement of the batch's
-- transaction, as cons_fence.sql is of a batch of orders: records each fence
-- unless a newer one is stored, and returns the users whose payment may go
-- ahead. A user missing from the result holds a stale lock (its lease ran
-- out and a newer holder wrote since): that payment is retried under a fresh
-- lock, the others go on. Rows are locked in user order, as cons_fence.sql
-- locks them, so a batch of payments and one of orders cannot deadlock here;
-- they stay locked until the transaction ends, so a user's orders and
-- payments are written one transaction at a time.
INSERT INTO user_fences AS f (user_id, fence)
SELECT u, fc FROM unnest($1::bigint[], $2::bigint[]) AS t(u, fc) ORDER BY u
ON CONFLICT (user_id) DO UPDATE SET fence = EXCLUDED.fence WHERE f.fence <= EXCLUDED.fence
RETURNING user_id
