-- A refusal is final (issue #55, item 1): an order id the consumer refused
-- is settled, and a redelivery, a replay or a re-publication of it changes
-- nothing, as one of an order already in orders changes nothing.
--
-- Before this, only orders was read before an insert. Since units come back
-- (expiry, cancel: 008), that no longer sufficed: an order refused for want
-- of stock, replayed after another order's unit came back, was inserted and
-- took that unit, which Redis had meanwhile sold to another buyer, whose
-- 202 then ended refused; and the order was in both orders and
-- order_rejections, which 004 says never happens.
--
-- The consumer may not read order_rejections (a column grant would let it
-- read every buyer's refusals; 009 says the same of order_refused): two
-- functions answer for the ids it names, and nothing more.
--
-- Additive and safe to run on a live database: two functions and grants.
\if :{?consumer_role}
\else
\set consumer_role consumer
\endif

-- The refusals of the given order ids, with the buyer, item and reason each
-- was refused for (consumer/sql/cons_existing.sql: the lookup the consumer
-- makes before it decides a batch that met an order already settled).
-- order_rejections' primary key starts with order_id: an index probe per id.
CREATE OR REPLACE FUNCTION orders_refused(p_ids bigint[])
RETURNS TABLE (order_id bigint, user_id bigint, item_id bigint, reason text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT r.order_id, r.user_id, r.item_id, r.reason FROM order_rejections AS r WHERE r.order_id = ANY (p_ids)
$$;
REVOKE ALL ON FUNCTION orders_refused(bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orders_refused(bigint[]) TO :"consumer_role";

-- The guard of the consumer's insert (consumer/sql/cons_insert.sql), which
-- takes every order of a batch for new without looking anything up first:
-- when one of the ids was refused before, it fails the statement as an
-- order already in orders would, with unique_violation (23505) and the
-- refusals' key as the constraint, so the consumer rolls the batch back and
-- redoes it after the lookup, which finds the refusal (consumer/sink.c,
-- insert_redo). Returns true otherwise. The rows the check reads are not
-- locked: a refusal and an insert of one order id are made by the consumer
-- holding that order's user lock and fence, one at a time.
CREATE OR REPLACE FUNCTION orders_not_refused(p_ids bigint[])
RETURNS boolean LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM order_rejections AS r WHERE r.order_id = ANY (p_ids)) THEN
        RAISE EXCEPTION 'an order of the batch was refused before'
            USING ERRCODE = 'unique_violation', CONSTRAINT = 'order_rejections_pkey', TABLE = 'order_rejections';
    END IF;
    RETURN true;
END
$$;
REVOKE ALL ON FUNCTION orders_not_refused(bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orders_not_refused(bigint[]) TO :"consumer_role";
