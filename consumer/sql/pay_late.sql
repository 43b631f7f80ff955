-- $1 order id, $2 user id, $3 paid_at (ms since the epoch), $4 the payment's
-- reference, $5 what the order was (late_payments.status_then). A payment
-- that came after its order stopped waiting for one: recorded, for the shop
-- to refund; the order and the stock are left alone. A replay records
-- nothing new (the command tag says how many rows: 0 or 1).
INSERT INTO late_payments (order_id, user_id, paid_at, ref, status_then)
VALUES ($1::bigint, $2::bigint, timestamptz 'epoch' + $3::bigint * interval '1 millisecond', $4::text, $5::text)
ON CONFLICT DO NOTHING
