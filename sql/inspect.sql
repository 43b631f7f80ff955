-- Inspection for operators: psql -X -f sql/inspect.sql (with -v item=ID for
-- one item; without it, all items). Read-only; the views are in
-- sql/migrations/005_inspect_views.sql and 010_order_states.sql (the states
-- after the sale). 'seckillctl inspect' prints the same
-- against the configured database, plus the dead-letter count from Kafka.
\if :{?item}
\else
\set item NULL
\endif

\echo '== sold vs stock per item'
SELECT * FROM inspect_sold WHERE :item::bigint IS NULL OR item_id = :item::bigint ORDER BY item_id;

\echo '== orders after the sale per item (pending payment, paid, expired, cancelled; units returned)'
SELECT * FROM inspect_item_states
 WHERE (:item::bigint IS NULL OR item_id = :item::bigint)
   AND (pay_within_s > 0 OR pending_payment + paid + expired + cancelled + returns_done + returns_waiting > 0)
 ORDER BY item_id;

\echo '== items whose stock_left disagrees with their orders (must be none)'
SELECT * FROM inspect_stock_mismatch WHERE :item::bigint IS NULL OR item_id = :item::bigint ORDER BY item_id;

\echo '== users with more than one order for an item (must be none)'
SELECT * FROM inspect_multi_orders WHERE :item::bigint IS NULL OR item_id = :item::bigint ORDER BY item_id, user_id;

\echo '== orders per minute (latest 20)'
SELECT minute, sum(orders) AS orders FROM inspect_orders_per_minute
 WHERE :item::bigint IS NULL OR item_id = :item::bigint GROUP BY minute ORDER BY minute DESC LIMIT 20;

\echo '== reservation-to-persist latency (ms)'
SELECT * FROM inspect_latency WHERE :item::bigint IS NULL OR item_id = :item::bigint ORDER BY item_id;

\echo '== orders the consumer refused, by reason (alert on any)'
SELECT * FROM inspect_rejections WHERE :item::bigint IS NULL OR item_id = :item::bigint ORDER BY item_id, reason;

\echo '== orders waiting for their payment or changed after the sale (latest 20; inspect_order_states has all)'
SELECT order_id, item_id, user_id, status, pay_by, status_changed_at, return_reason, in_redis_at
  FROM inspect_order_states
 WHERE (:item::bigint IS NULL OR item_id = :item::bigint) AND status <> 'final'
 ORDER BY coalesce(status_changed_at, persisted_at) DESC LIMIT 20;

-- Late payments (migration 009) only where the table exists: psql decides
-- before it sends the query, so a database migrated before 009 reads fine.
SELECT to_regclass('late_payments') IS NOT NULL AS has_late \gset
\if :has_late
\echo '== late payments: the order no longer waited for one (each a refund)'
SELECT coalesce(o.item_id, rj.item_id) AS item_id, l.status_then, count(*) AS payments,
       min(l.paid_at) AS first_paid, max(l.paid_at) AS last_paid
  FROM late_payments l
  LEFT JOIN orders o ON o.order_id = l.order_id
  LEFT JOIN LATERAL (SELECT r.item_id FROM order_rejections r WHERE r.order_id = l.order_id LIMIT 1) rj
         ON o.order_id IS NULL
 WHERE :item::bigint IS NULL OR coalesce(o.item_id, rj.item_id) = :item::bigint
 GROUP BY 1, 2 ORDER BY 1, 2;
\endif
