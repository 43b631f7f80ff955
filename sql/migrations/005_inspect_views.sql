-- Views for operators: sql/inspect.sql and 'seckillctl inspect' read them.
-- Filter on item_id: the planner pushes the filter into each view.

-- Sold vs stock per item; expected_left is what stock_left must be.
CREATE VIEW inspect_sold AS
SELECT i.item_id, i.name, i.stock_total, count(o.order_id) AS sold, i.stock_left,
       i.stock_total - count(o.order_id) AS expected_left
  FROM items i LEFT JOIN orders o USING (item_id)
 GROUP BY i.item_id;

-- Items whose stock_left disagrees with their orders (must be none).
CREATE VIEW inspect_stock_mismatch AS
SELECT item_id, stock_total, stock_left, sold, expected_left
  FROM inspect_sold WHERE stock_left <> expected_left;

-- Users holding more than one order for an item (must be none: the unique
-- constraint forbids it; the view proves it).
CREATE VIEW inspect_multi_orders AS
SELECT item_id, user_id, count(*) AS orders
  FROM orders GROUP BY item_id, user_id HAVING count(*) > 1;

CREATE VIEW inspect_orders_per_minute AS
SELECT item_id, date_trunc('minute', reserved_at) AS minute, count(*) AS orders
  FROM orders GROUP BY item_id, date_trunc('minute', reserved_at);

-- From the reservation in Redis to the row here, per item, in milliseconds.
CREATE VIEW inspect_latency AS
SELECT item_id, count(*) AS orders,
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 1) AS p50_ms,
       round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 1) AS p99_ms,
       round(max(ms)::numeric, 1) AS max_ms
  FROM (SELECT item_id, extract(epoch FROM persisted_at - reserved_at) * 1000 AS ms FROM orders) t
 GROUP BY item_id;

-- Orders the consumer refused, by reason (alert on any).
CREATE VIEW inspect_rejections AS
SELECT item_id, reason, count(*) AS orders, max(rejected_at) AS last
  FROM order_rejections GROUP BY item_id, reason;
