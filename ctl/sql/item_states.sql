-- $1 item id: every settled order, as the buyers' status calls show it
-- (the orders hash's "user|state|reserved_ms|settled_ms|detail", times in ms
-- since the epoch): persisted 'c' (no payment step), and after the sale
-- (issue #44, seckill_mark) 'w' waiting for its payment (detail: pay_by),
-- 'p' paid, 'x' expired, 'k' cancelled (detail: when it changed); refused
-- 'r' (detail: the reason). The 7th column says whether Redis must show that
-- state already: an expired or cancelled order is marked in Redis with its
-- return, so until order_returns says the return is done, Redis may still
-- show the state before (reconcile does not count that as stale).
SELECT o.order_id, o.user_id,
       CASE o.status WHEN 'pending_payment' THEN 'w' WHEN 'paid' THEN 'p' WHEN 'expired' THEN 'x'
                     WHEN 'cancelled' THEN 'k' ELSE 'c' END AS state,
       (extract(epoch FROM o.reserved_at) * 1000)::bigint AS reserved_ms,
       (extract(epoch FROM o.persisted_at) * 1000)::bigint AS settled_ms,
       CASE o.status
           WHEN 'final' THEN ''
           WHEN 'pending_payment' THEN ((extract(epoch FROM o.pay_by) * 1000)::bigint)::text
           ELSE ((extract(epoch FROM coalesce(rt.created_at, o.status_changed_at, o.persisted_at)) * 1000)
                 ::bigint)::text
       END AS reason,
       o.status NOT IN ('expired', 'cancelled') OR rt.done_at IS NOT NULL AS in_redis
  FROM orders o LEFT JOIN order_returns rt ON rt.order_id = o.order_id
 WHERE o.item_id = $1
UNION ALL
SELECT order_id, user_id, 'r',
       (extract(epoch FROM reserved_at) * 1000)::bigint,
       (extract(epoch FROM rejected_at) * 1000)::bigint, reason, true
  FROM order_rejections WHERE item_id = $1
