-- $1 order ids, $2 user ids: what became of the orders that payments of a
-- batch could not pay (pay_apply.sql changed no row of theirs). One row per
-- place an order is found, its id last:
--   source 'orders': its status, buyer, item, status_reason and
--                    status_changed_at (ms since the epoch);
--   source 'refused': the consumer refused it for this buyer
--                    (order_rejections, asked through order_refused: the
--                    consumer may not read that table).
-- No row for an order: not persisted yet (the orders topic is behind the
-- payments one).
WITH t AS (
    SELECT o, u FROM unnest($1::bigint[], $2::bigint[]) AS t(o, u)
)
SELECT 'orders' AS source, o.status, o.user_id, o.item_id, o.status_reason,
       (extract(epoch FROM o.status_changed_at) * 1000)::bigint AS changed_ms, t.o AS order_id
  FROM t JOIN orders AS o ON o.order_id = t.o
UNION ALL
SELECT 'refused', NULL, t.u, NULL, NULL, NULL, t.o
  FROM t
 WHERE order_refused(t.o, t.u)
