-- $1 user ids (distinct, ascending), $2 the fence each user's lock carries.
-- Records each fence unless a newer one is stored and returns the users whose
-- write may go ahead. A user missing from the result holds a stale lock: its
-- lease ran out and a newer holder has written since. Equal fences pass: that
-- is the same acquisition retrying after an unknown commit outcome.
-- Rows are locked in user order, so concurrent batches cannot deadlock here;
-- the row lock also serialises two writers of one user until commit.
INSERT INTO user_fences AS f (user_id, fence)
SELECT u, fc FROM unnest($1::bigint[], $2::bigint[]) AS t(u, fc) ORDER BY u
ON CONFLICT (user_id) DO UPDATE SET fence = EXCLUDED.fence WHERE f.fence <= EXCLUDED.fence
RETURNING user_id
