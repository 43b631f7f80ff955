-- A unit given back, written once (issue #56, step 7). An order that gave
-- its unit back (expired: consumer/sql/cons_expire.sql; cancelled by its
-- buyer: consumer/sql/cons_cancel.sql) has it added to its item's
-- stock_left and a row in order_returns, which the consumer's returns
-- outbox sends to Redis (consumer/outbox.c). Both statements did that with
-- the same lines; now they call units_back with the orders they changed, in
-- the same statement, so the order's new status, the stock and the return
-- still commit together or not at all.
--
-- The item rows are locked in id order first, as the consumer's insert locks
-- them (cons_insert.sql), so an expiry, a cancel and a batch of inserts
-- never deadlock on them.
--
-- SECURITY INVOKER (the default): it runs with the caller's rights, which
-- are the consumer's own (007, 008, 011: stock_left, order_returns); only
-- the consumer may call it. Additive and safe to run on a live database:
-- one function and its grant. Apply it before upgrading the consumers,
-- which call it (one without it would have every cancel refused and every
-- expiry retried, said once while it lasts).
\if :{?consumer_role}
\else
\set consumer_role consumer
\endif

-- p_orders, p_items, p_users: the orders (one element each, in step), each
-- order once; p_reason: order_returns.reason ('expired' or 'cancelled');
-- p_first_try_ms: how long before another consumer's retry may send the
-- return (0: at once). NULL arrays (array_agg of no rows) give nothing
-- back. Returns how many units went back.
CREATE OR REPLACE FUNCTION units_back(p_orders bigint[], p_items bigint[], p_users bigint[], p_reason text,
                                      p_first_try_ms bigint)
RETURNS integer LANGUAGE plpgsql SET search_path = public, pg_temp AS $$
DECLARE
    given integer;
BEGIN
    IF p_orders IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM 1 FROM items AS it WHERE it.item_id = ANY (p_items) ORDER BY it.item_id FOR NO KEY UPDATE;
    UPDATE items AS it SET stock_left = it.stock_left + d.n
      FROM (SELECT i, count(*)::integer AS n FROM unnest(p_items) AS i GROUP BY i) AS d
     WHERE it.item_id = d.i;
    INSERT INTO order_returns (order_id, item_id, user_id, reason, next_try_at)
    SELECT o, i, u, p_reason, now() + p_first_try_ms * interval '1 millisecond'
      FROM unnest(p_orders, p_items, p_users) AS t(o, i, u);
    GET DIAGNOSTICS given = ROW_COUNT;
    RETURN given;
END
$$;
REVOKE ALL ON FUNCTION units_back(bigint[], bigint[], bigint[], text, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION units_back(bigint[], bigint[], bigint[], text, bigint) TO :"consumer_role";
