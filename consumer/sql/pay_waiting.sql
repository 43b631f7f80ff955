-- $1 order ids, $2 user ids: of the payments fetched and not applied yet,
-- and those waiting for their orders (consumer/payments.c), the orders
-- PostgreSQL has now: in orders (whoever's: pay_order.sql tells another
-- buyer's apart, under the user's lock), or refused for this buyer
-- (order_refused: the consumer may not read order_rejections). One row per
-- order found, its id. No lock, no write: payments whose orders are not
-- here never take a user's lock nor write a fence, and the ones whose
-- orders are go on to the locked batch.
-- CASE, not OR: order_refused is looked at only for an order that is not
-- in orders (a function call per row otherwise; PostgreSQL may evaluate the
-- arms of an OR in any order).
SELECT t.o
  FROM unnest($1::bigint[], $2::bigint[]) AS t(o, u)
 WHERE CASE WHEN EXISTS (SELECT 1 FROM orders AS o WHERE o.order_id = t.o) THEN true
            ELSE order_refused(t.o, t.u) END
