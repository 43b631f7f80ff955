-- $1 order ids whose return did not reach Redis, $2 the longest wait in ms.
-- The next try waits twice as long as the last one (from 100 ms), up to $2,
-- so an outage costs Redis a try per return every $2 at most.
-- The rows are locked in id order first (lk): two consumers marking
-- overlapping sets (any consumer may send any return) would otherwise lock
-- them in whatever order each UPDATE meets them, and deadlock.
WITH lk AS (
    SELECT order_id FROM order_returns
     WHERE order_id = ANY ($1::bigint[]) AND done_at IS NULL
     ORDER BY order_id FOR NO KEY UPDATE
)
UPDATE order_returns AS r
   SET tries = r.tries + 1,
       next_try_at = now() + least($2::bigint, 100 * 2 ^ least(r.tries, 20)) * interval '1 millisecond'
  FROM lk
 WHERE r.order_id = lk.order_id
