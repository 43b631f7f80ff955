-- Whether the table of late payments exists (sql/migrations/009, issue #44):
-- the readers of late payments ask first, so seckillctl works against a
-- database migrated before it as well as after.
SELECT to_regclass('late_payments') IS NOT NULL
