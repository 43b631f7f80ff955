-- $1 order ids, $2 user ids, $3 item ids of the batch: the orders already
-- persisted with one of these ids or for one of these (user, item) pairs.
-- By id every order counts (a redelivered order that has since expired is
-- still a duplicate, never a new row); by pair only a live one: an order
-- that expired or was cancelled gave its unit back, and its buyer may buy
-- again. holds_unit says which are live, and is the one-per-user index's
-- predicate, so that index finds them.
-- The fourth column: for an order pending payment, the end of its window in
-- ms since the epoch (a redelivered order shows it again, consumer/settle.c),
-- else NULL. The cancels of a batch are not looked up here: a cancel takes
-- no order id and no buyer's place (cons_cancel.sql).
-- The fifth: NULL for an order, or the reason an order of these ids was
-- refused for (order_rejections, read through orders_refused: the consumer
-- may not read that table; sql/migrations/014_refusals_final.sql). A
-- refused order id is settled as surely as a persisted one: redelivered,
-- replayed or published again it stays refused and is never inserted, not
-- even once a unit came back (consumer/sink.c).
SELECT o.order_id, o.user_id, o.item_id,
       CASE WHEN o.status = 'pending_payment' THEN (extract(epoch FROM o.pay_by) * 1000)::bigint END,
       NULL::text
  FROM orders o WHERE o.order_id = ANY ($1::bigint[])
UNION
SELECT o.order_id, o.user_id, o.item_id,
       CASE WHEN o.status = 'pending_payment' THEN (extract(epoch FROM o.pay_by) * 1000)::bigint END,
       NULL::text
  FROM orders o JOIN unnest($2::bigint[], $3::bigint[]) AS t(u, i) ON o.user_id = t.u AND o.item_id = t.i
 WHERE o.holds_unit
UNION ALL
SELECT r.order_id, r.user_id, r.item_id, NULL::bigint, r.reason FROM orders_refused($1::bigint[]) AS r
