-- $1 item id or NULL for all: orders by state after the sale, the ones past
-- their window not expired yet, and the returned units, given back to Redis
-- or waiting for it (sql/migrations/010_order_states.sql). Items that never
-- had an order after the sale (all final, or none) are left out.
SELECT item_id, pay_within_s, pending_payment, overdue, paid, expired, cancelled, final, returns_done,
       returns_waiting
  FROM inspect_item_states
 WHERE ($1::bigint IS NULL OR item_id = $1)
   AND (pay_within_s > 0 OR pending_payment + paid + expired + cancelled + returns_done + returns_waiting > 0)
 ORDER BY item_id
