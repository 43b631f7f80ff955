-- An item's Redis state at one instant, for reconciliation.
-- KEYS[1] stock, KEYS[2] buyers, KEYS[3] pending, KEYS[4] unpub, KEYS[5] window,
-- KEYS[6] orders
-- Returns {stock or false, {order id, message, ...}, {user id, ...},
--          {order id, reserved_at_ms, ...}, {starts_ms or false, ends_ms or false},
--          {field, value, ...} of the orders hash}.
-- One script, so no reservation can move between the reads.
return {
  redis.call('GET', KEYS[1]),
  redis.call('HGETALL', KEYS[3]),
  redis.call('SMEMBERS', KEYS[2]),
  redis.call('ZRANGE', KEYS[4], 0, -1, 'WITHSCORES'),
  redis.call('HMGET', KEYS[5], 'starts_ms', 'ends_ms'),
  redis.call('HGETALL', KEYS[6]),
}
