-- Inspection for operators: psql -X -f sql/inspect.sql (with -v item=ID for
-- one item; without it, all items). Read-only; the views are in
-- sql/migrations/005_inspect_views.sql. 'seckillctl inspect' prints the same
-- against the configured database, plus the dead-letter count from Kafka.
\if :{?item}
\else
\set item NULL
\endif

\echo '== sold vs stock per item'
SELECT * FROM inspect_sold WHERE :item::bigint IS NULL OR item_id = :item::bigint ORDER BY item_id;

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
