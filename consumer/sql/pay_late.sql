-- $1 order ids, $2 user ids, $3 paid_at (ms since the epoch), $4 the
-- payments' references, $5 what each order was (late_payments.status_then).
-- Payments that came after their orders stopped waiting for one: recorded,
-- for the shop to refund; the orders and the stock are left alone. A replay
-- records nothing new: the command tag says how many rows are new (the
-- consumer may not read the table back, so a batch whose count is neither
-- all nor none is recorded again one payment at a time, to tell which).
INSERT INTO late_payments (order_id, user_id, paid_at, ref, status_then)
SELECT o, u, timestamptz 'epoch' + at * interval '1 millisecond', ref, th
  FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[], $5::text[]) AS t(o, u, at, ref, th)
ON CONFLICT DO NOTHING
