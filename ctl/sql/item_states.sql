-- $1 item id: every settled order, as the buyers' status calls show it:
-- persisted ('c') and refused ('r'), times in ms since the epoch.
SELECT order_id, user_id, 'c' AS state,
       (extract(epoch FROM reserved_at) * 1000)::bigint AS reserved_ms,
       (extract(epoch FROM persisted_at) * 1000)::bigint AS settled_ms, '' AS reason
  FROM orders WHERE item_id = $1
UNION ALL
SELECT order_id, user_id, 'r',
       (extract(epoch FROM reserved_at) * 1000)::bigint,
       (extract(epoch FROM rejected_at) * 1000)::bigint, reason
  FROM order_rejections WHERE item_id = $1
