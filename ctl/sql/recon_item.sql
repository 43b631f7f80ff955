-- $1 item id: its stock, what is sold and the users holding two orders.
SELECT i.stock_total, i.stock_left,
       (SELECT count(*) FROM orders o WHERE o.item_id = i.item_id) AS sold,
       (SELECT count(*) FROM (SELECT 1 FROM orders o WHERE o.item_id = i.item_id
                               GROUP BY o.user_id HAVING count(*) > 1) d) AS dup_users
  FROM items i WHERE i.item_id = $1
