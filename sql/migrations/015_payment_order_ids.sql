-- Payments for order ids no producer issued (issue #55, item 3): the
-- consumer refuses at once a payment whose order id's block (order ids are
-- block << 20 | seq, producer/orderid.c) is 0 or above the highest block
-- order_id_blocks holds, rather than waiting consumer.payment_wait_ms for an
-- order that can never come (consumer/sql/pay_blocks.sql). It reads that
-- column only: who took a block (host, pid, taken_at) stays the operator's.
--
-- Additive and safe to run on a live database: one grant. Apply it before
-- upgrading the consumers: a consumer without it cannot read the blocks; it
-- says so once, and lets such payments wait consumer.payment_wait_ms (as
-- before) instead of refusing them at once.
\if :{?consumer_role}
\else
\set consumer_role consumer
\endif

GRANT SELECT (block) ON order_id_blocks TO :"consumer_role";
