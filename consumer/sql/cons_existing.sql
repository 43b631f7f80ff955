-- $1 order ids, $2 user ids, $3 item ids of the batch: the orders already
-- persisted with one of these ids or for one of these (user, item) pairs.
-- By id every order counts (a redelivered order that has since expired is
-- still a duplicate, never a new row); by pair only a live one: an order
-- that expired or was cancelled gave its unit back, and its buyer may buy
-- again (the one-per-user index leaves those out too).
SELECT o.order_id, o.user_id, o.item_id FROM orders o WHERE o.order_id = ANY ($1::bigint[])
UNION
SELECT o.order_id, o.user_id, o.item_id
  FROM orders o JOIN unnest($2::bigint[], $3::bigint[]) AS t(u, i) ON o.user_id = t.u AND o.item_id = t.i
 WHERE o.status NOT IN ('expired', 'cancelled')
