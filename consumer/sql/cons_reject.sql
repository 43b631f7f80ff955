-- $1 order ids, $2 user ids, $3 item ids, $4 reasons, $5 reserved_at (ms).
-- Records refused orders; a replay records nothing new.
INSERT INTO order_rejections (order_id, user_id, item_id, reason, reserved_at)
SELECT o, u, i, rs, timestamptz 'epoch' + r * interval '1 millisecond'
  FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[], $5::bigint[]) AS t(o, u, i, rs, r)
ON CONFLICT DO NOTHING
