-- $1 order ids, $2 user ids, $3 item ids, $4 reserved_at (ms since the epoch),
-- $5 fences. Inserts the orders that fit and takes one unit of stock for each
-- row really inserted, in one statement. Returns the inserted order ids.
WITH ins AS (
    INSERT INTO orders (order_id, user_id, item_id, qty, reserved_at, fence)
    SELECT o, u, i, 1, timestamptz 'epoch' + r * interval '1 millisecond', fc
      FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[]) AS t(o, u, i, r, fc)
    ON CONFLICT DO NOTHING
    RETURNING order_id, item_id
), upd AS (
    UPDATE items AS it SET stock_left = it.stock_left - d.n
      FROM (SELECT item_id, count(*)::integer AS n FROM ins GROUP BY item_id) AS d
     WHERE it.item_id = d.item_id
)
SELECT order_id FROM ins
