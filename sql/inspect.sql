-- Inspection queries for operators: psql -X -f sql/inspect.sql (with -v item=ID
-- to look at one item; without it, all items). Read-only.
\if :{?item}
\else
\set item NULL
\endif

\echo '== sold vs stock per item'
SELECT i.item_id, i.name, i.stock_total, count(o.order_id) AS sold, i.stock_left,
       i.stock_total - count(o.order_id) AS expected_left
  FROM items i LEFT JOIN orders o USING (item_id)
 WHERE :item::bigint IS NULL OR i.item_id = :item::bigint
 GROUP BY i.item_id ORDER BY i.item_id;

\echo '== users with more than one order for an item (must be none)'
SELECT user_id, item_id, count(*) AS orders
  FROM orders WHERE :item::bigint IS NULL OR item_id = :item::bigint
 GROUP BY user_id, item_id HAVING count(*) > 1;

\echo '== items whose stock_left disagrees with their orders (must be none)'
SELECT i.item_id, i.stock_total, i.stock_left, count(o.order_id) AS sold
  FROM items i LEFT JOIN orders o USING (item_id)
 WHERE :item::bigint IS NULL OR i.item_id = :item::bigint
 GROUP BY i.item_id HAVING i.stock_left <> i.stock_total - count(o.order_id);

\echo '== orders per minute'
SELECT date_trunc('minute', reserved_at) AS minute, count(*) AS orders
  FROM orders WHERE :item::bigint IS NULL OR item_id = :item::bigint
 GROUP BY 1 ORDER BY 1 DESC LIMIT 20;

\echo '== reservation-to-persist latency (ms)'
SELECT count(*) AS orders,
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 1) AS p50,
       round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 1) AS p99,
       round(max(ms)::numeric, 1) AS max
  FROM (SELECT extract(epoch FROM persisted_at - reserved_at) * 1000 AS ms
          FROM orders WHERE :item::bigint IS NULL OR item_id = :item::bigint) t;

\echo '== orders the consumer refused, by reason (alert on any)'
SELECT item_id, reason, count(*) FROM order_rejections
 WHERE :item::bigint IS NULL OR item_id = :item::bigint
 GROUP BY 1, 2 ORDER BY 1, 2;
