-- $1 order ids whose return did not reach Redis, $2 the longest wait in ms.
-- The next try waits twice as long as the last one (from 100 ms), up to $2,
-- so an outage costs Redis a try per return every $2 at most.
UPDATE order_returns
   SET tries = tries + 1,
       next_try_at = now() + least($2::bigint, 100 * 2 ^ least(tries, 20)) * interval '1 millisecond'
 WHERE order_id = ANY ($1::bigint[]) AND done_at IS NULL
