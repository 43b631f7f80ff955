-- $1 order ids, $2 user ids, $3 item ids, $4 reserved_at (ms since the epoch),
-- $5 fences. Inserts the orders that fit and takes one unit of stock for each,
-- in one statement. Returns the inserted orders that are pending payment,
-- each with the end of its window in ms since the epoch (the buyers' status
-- shows it, consumer/settle.c); an order without a window returns no row.
-- An order of an item with a payment window (items.pay_within_s > 0) starts
-- 'pending_payment', to be paid by its persisted_at (now(), the transaction's
-- time, which is also persisted_at's default) plus the window; any other is
-- 'final' (sql/migrations/008_order_life.sql). The window is read here, in
-- the statement, so no order is ever persisted without it; nor without its
-- row in order_deadlines, which the expiry reads (cons_expire.sql).
-- No ON CONFLICT: the statement inserts every row or fails. An order already
-- there (a redelivery the batch did not look up first, or a concurrent
-- writer of the same id) fails it with unique_violation and the consumer
-- redoes the batch after looking up cons_existing.sql; a batch that did look
-- up has only new rows to insert. So does an order id refused before
-- (orders_not_refused, sql/migrations/014_refusals_final.sql: one probe of
-- order_rejections' key per order, once per statement): a refusal is final,
-- even once a unit came back to the item. Speculative insertion would cost every row
-- two more index probes for what a redelivered batch needs once.
-- The item rows are locked only here, after the inserts, and in id order
-- (lk): concurrent batches insert side by side and queue on an item row only
-- for the update and the commit. lk locks in id order because the lock is
-- applied after the sort; upd changes only rows lk has locked. When the
-- batch was decided on an unlocked read of the stock and a concurrent batch
-- took the units meanwhile, stock_left would go below zero: the CHECK on it
-- (items_stock_left_range) fails this statement and the consumer redoes the
-- batch under cons_items.sql's lock.
WITH ins AS (
    INSERT INTO orders (order_id, user_id, item_id, qty, reserved_at, fence, status, pay_by)
    SELECT o, u, i, 1, timestamptz 'epoch' + r * interval '1 millisecond', fc,
           CASE WHEN w.pay_within_s > 0 THEN 'pending_payment' ELSE 'final' END,
           CASE WHEN w.pay_within_s > 0 THEN now() + w.pay_within_s * interval '1 second' END
      FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[]) AS t(o, u, i, r, fc)
      LEFT JOIN items AS w ON w.item_id = t.i
     WHERE orders_not_refused($1::bigint[])
    RETURNING order_id, item_id, pay_by
), dl AS (
    INSERT INTO order_deadlines (order_id, pay_by)
    SELECT order_id, pay_by FROM ins WHERE pay_by IS NOT NULL
), d AS (
    SELECT item_id, count(*)::integer AS n FROM ins GROUP BY item_id
), lk AS (
    SELECT it.item_id FROM items AS it WHERE it.item_id IN (SELECT item_id FROM d)
     ORDER BY it.item_id FOR NO KEY UPDATE
), upd AS (
    UPDATE items AS it SET stock_left = it.stock_left - d.n
      FROM d JOIN lk USING (item_id)
     WHERE it.item_id = d.item_id
)
SELECT order_id, (extract(epoch FROM pay_by) * 1000)::bigint FROM ins WHERE pay_by IS NOT NULL
