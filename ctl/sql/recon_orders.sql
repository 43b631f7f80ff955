-- $1 item id: every persisted order's id and user, whether it holds a unit
-- ('final', 'pending_payment', 'paid'), and for an expired or cancelled one
-- whether its return is done: Redis has its unit back (and the order in its
-- returned set). NULL for an order that never gave its unit back.
SELECT o.order_id, o.user_id, o.status IN ('final', 'pending_payment', 'paid') AS live,
       rt.done_at IS NOT NULL AS return_done
  FROM orders o LEFT JOIN order_returns rt ON rt.order_id = o.order_id
 WHERE o.item_id = $1
