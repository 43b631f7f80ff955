-- $1 item id or NULL for all: payments that found their order no longer
-- waiting for one (late_payments, sql/migrations/009: expired, cancelled,
-- refused, or paid by another payment), per item and what the order was
-- then: each is a refund to make. The item comes from the order, or from
-- its refusal (a refused order has no row in orders). Run only when
-- late_exists.sql says the table exists.
SELECT coalesce(o.item_id, rj.item_id) AS item_id, l.status_then, count(*) AS payments,
       min(l.paid_at) AS first_paid, max(l.paid_at) AS last_paid
  FROM late_payments l
  LEFT JOIN orders o ON o.order_id = l.order_id
  LEFT JOIN LATERAL (SELECT r.item_id FROM order_rejections r WHERE r.order_id = l.order_id LIMIT 1) rj
         ON o.order_id IS NULL
 WHERE $1::bigint IS NULL OR coalesce(o.item_id, rj.item_id) = $1
 GROUP BY 1, 2 ORDER BY 1, 2
