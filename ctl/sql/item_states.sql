-- $1 item id: every settled order, as the buyers' status calls show it:
-- persisted ('c') and refused ('r'), times in ms since the epoch. An expired
-- or cancelled order is left out: its buyer holds no unit (the status calls
-- do not know those states yet, issue #44).
SELECT order_id, user_id, 'c' AS state,
       (extract(epoch FROM reserved_at) * 1000)::bigint AS reserved_ms,
       (extract(epoch FROM persisted_at) * 1000)::bigint AS settled_ms, '' AS reason
  FROM orders o WHERE o.item_id = $1 AND o.status NOT IN ('expired', 'cancelled')
UNION ALL
SELECT order_id, user_id, 'r',
       (extract(epoch FROM reserved_at) * 1000)::bigint,
       (extract(epoch FROM rejected_at) * 1000)::bigint, reason
  FROM order_rejections WHERE item_id = $1
