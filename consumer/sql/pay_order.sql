-- $1 order id, $2 user id: what became of an order a payment could not pay
-- (pay_apply.sql changed no row). One row per place the order is found:
--   source 'orders': its status, buyer, item, status_reason and
--                    status_changed_at (ms since the epoch);
--   source 'refused': the consumer refused it for this buyer
--                    (order_rejections, asked through order_refused: the
--                    consumer may not read that table).
-- No row: not persisted yet (the orders topic is behind the payments one).
SELECT 'orders' AS source, o.status, o.user_id, o.item_id, o.status_reason,
       (extract(epoch FROM o.status_changed_at) * 1000)::bigint AS changed_ms
  FROM orders AS o
 WHERE o.order_id = $1::bigint
UNION ALL
SELECT 'refused', NULL, $2::bigint, NULL, NULL, NULL
 WHERE order_refused($1::bigint, $2::bigint)
