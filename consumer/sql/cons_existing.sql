-- $1 order ids, $2 user ids, $3 item ids of the batch: the orders already
-- persisted with one of these ids or for one of these (user, item) pairs.
SELECT o.order_id, o.user_id, o.item_id FROM orders o WHERE o.order_id = ANY ($1::bigint[])
UNION
SELECT o.order_id, o.user_id, o.item_id
  FROM orders o JOIN unnest($2::bigint[], $3::bigint[]) AS t(u, i) ON o.user_id = t.u AND o.item_id = t.i
