-- $1 item ids (a bigint[]): payments that found their order no longer
-- waiting for one (late_payments, to be refunded), per item; the item comes
-- from the order, or from its refusal. Run only when late_exists.sql says
-- the table exists.
SELECT coalesce(o.item_id, rj.item_id) AS item_id, count(*) AS late_payments
  FROM late_payments l
  LEFT JOIN orders o ON o.order_id = l.order_id
  LEFT JOIN LATERAL (SELECT r.item_id FROM order_rejections r WHERE r.order_id = l.order_id LIMIT 1) rj
         ON o.order_id IS NULL
 WHERE coalesce(o.item_id, rj.item_id) = ANY ($1::bigint[])
 GROUP BY 1 ORDER BY 1
