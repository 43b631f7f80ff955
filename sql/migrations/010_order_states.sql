-- Everything that reads orders learns the states after the sale (issue #44):
-- the operators' views, and what the consumer reads to copy a returned
-- order's state into Redis.
--
-- Idempotent and safe on a live database: views replaced or made (CREATE OR
-- REPLACE keeps the old columns in their places and adds new ones at the
-- end), and column grants. It does not need 009 (late payments): the
-- readers of late_payments look for the table first (seckillctl inspect).
SET client_min_messages = warning;
\if :{?consumer_role}
\else
\set consumer_role consumer
\endif

-- Sold vs stock per item. Only an order that holds a unit is sold: 'final'
-- (no payment step), 'pending_payment' and 'paid'. An expired or cancelled
-- order gave its unit back to stock_left in the transaction that changed
-- its status, so counting it, as 005 did, reported every item with an
-- expired order as a stock mismatch. The counts per state come after.
CREATE OR REPLACE VIEW inspect_sold AS
SELECT i.item_id, i.name, i.stock_total,
       count(o.order_id) FILTER (WHERE o.status IN ('final', 'pending_payment', 'paid')) AS sold,
       i.stock_left,
       i.stock_total - count(o.order_id) FILTER (WHERE o.status IN ('final', 'pending_payment', 'paid'))
           AS expected_left,
       count(o.order_id) FILTER (WHERE o.status = 'pending_payment') AS pending_payment,
       count(o.order_id) FILTER (WHERE o.status = 'paid') AS paid,
       count(o.order_id) FILTER (WHERE o.status = 'expired') AS expired,
       count(o.order_id) FILTER (WHERE o.status = 'cancelled') AS cancelled,
       count(o.order_id) FILTER (WHERE o.status = 'final') AS final
  FROM items i LEFT JOIN orders o USING (item_id)
 GROUP BY i.item_id;

-- Users holding more than one live order for an item (must be none: the
-- unique index orders_one_per_user forbids it). A buyer whose order expired
-- or was cancelled may buy again (sale.rebuy_after_cancel): that earlier
-- order is not a second one.
CREATE OR REPLACE VIEW inspect_multi_orders AS
SELECT item_id, user_id, count(*) AS orders
  FROM orders WHERE status NOT IN ('expired', 'cancelled')
 GROUP BY item_id, user_id HAVING count(*) > 1;

-- Each order's state after the sale: where it is, until when it may be
-- paid, when and why it last changed, and for an expired or cancelled one
-- its return: recorded (returned_at) and given back to Redis (in_redis_at,
-- NULL while the consumer still has to).
CREATE OR REPLACE VIEW inspect_order_states AS
SELECT o.order_id, o.item_id, o.user_id, o.status, o.reserved_at, o.persisted_at, o.pay_by,
       o.status_changed_at, o.status_reason, r.reason AS return_reason, r.created_at AS returned_at,
       r.done_at AS in_redis_at, r.tries AS return_tries
  FROM orders o LEFT JOIN order_returns r USING (order_id);

-- Per item: its orders by state, the ones past their window the expiry has
-- not taken yet (overdue: a few for a second or two is normal, more says the
-- consumers' expiry is not running), and the units returned: given back to
-- Redis (returns_done) or still waiting for it (returns_waiting; alert when
-- it stays above 0).
CREATE OR REPLACE VIEW inspect_item_states AS
SELECT i.item_id, i.pay_within_s,
       (SELECT count(*) FROM orders o WHERE o.item_id = i.item_id AND o.status = 'final') AS final,
       (SELECT count(*) FROM orders o WHERE o.item_id = i.item_id AND o.status = 'pending_payment')
           AS pending_payment,
       (SELECT count(*) FROM orders o
         WHERE o.item_id = i.item_id AND o.status = 'pending_payment' AND o.pay_by < now()) AS overdue,
       (SELECT count(*) FROM orders o WHERE o.item_id = i.item_id AND o.status = 'paid') AS paid,
       (SELECT count(*) FROM orders o WHERE o.item_id = i.item_id AND o.status = 'expired') AS expired,
       (SELECT count(*) FROM orders o WHERE o.item_id = i.item_id AND o.status = 'cancelled') AS cancelled,
       (SELECT count(*) FROM order_returns r WHERE r.item_id = i.item_id AND r.done_at IS NOT NULL)
           AS returns_done,
       (SELECT count(*) FROM order_returns r WHERE r.item_id = i.item_id AND r.done_at IS NULL)
           AS returns_waiting
  FROM items i;

-- The views are the operators' (the admin role owns them); no program reads
-- them, so none is granted any (007: nothing by default).
REVOKE ALL ON inspect_sold, inspect_multi_orders, inspect_order_states, inspect_item_states FROM PUBLIC;

-- The consumer copies a returned order's state into the item's orders hash
-- (consumer/sql/cons_returns_due.sql): why it came back and when.
GRANT SELECT (reason, created_at) ON order_returns TO :"consumer_role";
