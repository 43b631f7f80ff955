-- $1 item id: every persisted order's id and user.
SELECT order_id, user_id FROM orders WHERE item_id = $1
