-- Room for a fence's next value on its own page (issue #44, item 8).
--
-- Every batch of payments, as every batch of orders, writes each user's
-- fence (consumer/sql/pay_fence.sql, cons_fence.sql). A user's row is
-- usually already there (written with the user's order), so the write is an
-- update of it. With user_fences' pages full, PostgreSQL put each new
-- version on another page and added an entry for it to the primary key:
-- 3.0 WAL records and 6.2 us per payment's fence (pg_stat_statements over
-- bench/expiry --payments 100000). With half of each page left free the
-- update is HOT (same page, no index entry): 2.1 records and 5.0 us.
-- The table has one small row per buyer; it takes twice the pages.
--
-- New pages only: the pages of fences written before keep theirs until a
-- VACUUM FULL of user_fences (an exclusive lock: between sales) repacks them.
SET client_min_messages = warning;

ALTER TABLE user_fences SET (fillfactor = 50);
