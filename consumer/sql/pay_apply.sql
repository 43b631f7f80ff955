-- $1 order id, $2 user id, $3 paid_at (ms since the epoch), $4 the payment's
-- reference. The payment: the order waiting for it becomes paid, when and
-- why said. Only an order still 'pending_payment' changes: READ COMMITTED
-- reads the row again once an expiry or a cancel that holds it commits, so
-- of a payment and an expiry racing for an order exactly one wins. Returns
-- the order's item (for Redis) when it was paid now; no row otherwise
-- (pay_order.sql says why).
UPDATE orders
   SET status = 'paid',
       status_changed_at = timestamptz 'epoch' + $3::bigint * interval '1 millisecond',
       status_reason = 'paid ' || $4::text
 WHERE order_id = $1::bigint AND user_id = $2::bigint AND status = 'pending_payment'
RETURNING item_id
