-- Payments (issue #44): the shop's payment service publishes each payment on
-- kafka.payments_topic; the consumer moves the order from 'pending_payment'
-- to 'paid' (status_changed_at the payment's time, status_reason 'paid REF'),
-- under the user's lock and fence, once.
--
-- A payment that comes too late, for an order that is no longer waiting for
-- one, never touches the order nor the stock (its unit may belong to another
-- buyer by now): it is recorded here, for the shop to refund or settle.
-- status_then says what the order was when the payment came:
--   expired     not paid within its window (its unit went back on sale)
--   cancelled   cancelled by its buyer
--   final       of an item without a payment window: nothing was owed
--   refused     the consumer refused the order (order_rejections)
--   paid_other  already paid, by another payment (another ref): paid twice
-- Keyed by order and payment reference: a replay of the payments topic
-- records each late payment once (INSERT ... ON CONFLICT DO NOTHING).
-- No foreign key to orders: a refused order has no row there.
--
-- Additive and safe to run on a live database: a new table and grants.
\if :{?consumer_role}
\else
\set consumer_role consumer
\endif

CREATE TABLE IF NOT EXISTS late_payments (
    order_id     bigint      NOT NULL CHECK (order_id > 0),
    user_id      bigint      NOT NULL CHECK (user_id > 0),
    paid_at      timestamptz NOT NULL,
    ref          text        NOT NULL CHECK (ref ~ '^[A-Za-z0-9_.:-]{1,64}$'),
    status_then  text        NOT NULL
                 CHECK (status_then IN ('expired', 'cancelled', 'final', 'refused', 'paid_other')),
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (order_id, ref)
);
-- The shop's look-ups: a buyer's late payments, the newest first.
CREATE INDEX IF NOT EXISTS late_payments_user_idx ON late_payments (user_id, recorded_at);

-- The consumer (consumer/sql/pay_*.sql), least privilege as in 007 and 008:
--   pay_fence      the user's fence: user_fences, granted in 007
--   pay_apply      UPDATE orders ... WHERE order_id, user_id, status RETURNING
--                  item_id: the columns granted in 007 and 008
--   pay_order      what became of the order: its status, why and when, and
--                  whether it was refused. The refusals stay unreadable to
--                  the consumer (a column grant would let it read them all):
--                  order_refused answers for one order and buyer only.
GRANT SELECT (status_reason, status_changed_at) ON orders TO :"consumer_role";
CREATE OR REPLACE FUNCTION order_refused(p_order bigint, p_user bigint)
RETURNS boolean LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT EXISTS (SELECT 1 FROM order_rejections WHERE order_id = p_order AND user_id = p_user)
$$;
REVOKE ALL ON FUNCTION order_refused(bigint, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION order_refused(bigint, bigint) TO :"consumer_role";
--   pay_late       records a late payment, ON CONFLICT DO NOTHING
GRANT INSERT (order_id, user_id, paid_at, ref, status_then) ON late_payments TO :"consumer_role";
