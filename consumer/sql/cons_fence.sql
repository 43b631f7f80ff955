-- $1 user ids (distinct), $2 the fence each user's lock carries: the users of
-- a batch of orders (consumer/sink.c) or of payments (consumer/payments.c,
-- one payment each), under the lock the workers take for a user, "user:ID".
-- The first statement of the batch's transaction: records each fence unless
-- a newer one is stored and returns the users whose write may go ahead. A
-- user missing from the result holds a stale lock: its lease ran out and a
-- newer holder has written since; that user's orders or payment are retried
-- under a fresh lock, the others go on. Equal fences pass: that is the same
-- acquisition retrying after an unknown commit outcome.
-- Rows are locked in user order, so concurrent batches, of orders and of
-- payments alike, cannot deadlock here; the row lock also serialises two
-- writers of one user until commit, so a user's orders and payments are
-- written one transaction at a time.
INSERT INTO user_fences AS f (user_id, fence)
SELECT u, fc FROM unnest($1::bigint[], $2::bigint[]) AS t(u, fc) ORDER BY u
ON CONFLICT (user_id) DO UPDATE SET fence = EXCLUDED.fence WHERE f.fence <= EXCLUDED.fence
RETURNING user_id
