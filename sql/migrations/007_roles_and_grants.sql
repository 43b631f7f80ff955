-- Least privilege (issue #19): what each program's role may do, derived from
-- the SQL it runs (docs/security.md has the table and the reasons).
--
-- Applied by scripts/migrate as the schema's owner (the admin role, which
-- owns every table, view and function of the migrations and so needs no
-- grant). The roles are made by the operator beforehand (scripts/stack does
-- it for the dev stack); a shop whose roles have other names passes them:
--   scripts/migrate -h DB -U admin -d seckill -v producer_role=shop_web -v consumer_role=shop_worker
-- A later migration that adds an object grants what it needs itself: no
-- default privileges hand new tables to anyone.
\if :{?producer_role}
\else
\set producer_role producer
\endif
\if :{?consumer_role}
\else
\set consumer_role consumer
\endif
SELECT current_database() AS dbname \gset

-- Nobody but the roles named here connects, and no one creates temporary
-- tables (PUBLIC has CONNECT and TEMP on every database by default).
REVOKE ALL ON DATABASE :"dbname" FROM PUBLIC;
GRANT CONNECT ON DATABASE :"dbname" TO :"producer_role", :"consumer_role";

-- The schema: only its owner creates in it (PostgreSQL 15 already revokes
-- CREATE from PUBLIC; older servers did not); the programs may look up names.
REVOKE ALL ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO :"producer_role", :"consumer_role";

-- Nothing of the schema's objects by default: the grants below are all.
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM PUBLIC;
-- Functions are executable by PUBLIC unless revoked (fence_advance is for
-- the admin's `lock run` users; the daemons do not call it).
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA public FROM PUBLIC;
-- (for functions admin creates later; a per-schema default cannot revoke)
ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;

-- The producer: a block of order ids (producer/sql/id_block_take.sql). The
-- identity column draws from its sequence without a grant on it.
GRANT INSERT (host, pid), SELECT (block) ON order_id_blocks TO :"producer_role";

-- The consumer (consumer/sql/cons_*.sql):
--   cons_fence     advance a user's fence: INSERT ... ON CONFLICT DO UPDATE
--                  SET fence ... WHERE ... RETURNING user_id
GRANT SELECT (user_id, fence), INSERT (user_id, fence), UPDATE (fence) ON user_fences TO :"consumer_role";
--   cons_existing  the orders already there; cons_insert inserts and returns
--                  order_id, item_id (persisted_at is its default)
GRANT SELECT (order_id, user_id, item_id),
      INSERT (order_id, user_id, item_id, qty, reserved_at, fence) ON orders TO :"consumer_role";
--   cons_peek, cons_items (FOR NO KEY UPDATE needs an UPDATE grant), and
--   cons_insert's take of a unit: stock_left is the one column it may change
GRANT SELECT (item_id, stock_left), UPDATE (stock_left) ON items TO :"consumer_role";
--   cons_reject    refusals, ON CONFLICT DO NOTHING
GRANT INSERT (order_id, user_id, item_id, reason, reserved_at) ON order_rejections TO :"consumer_role";
