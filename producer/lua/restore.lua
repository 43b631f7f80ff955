-- Give a reservation back: Kafka reported the order NOT_PERSISTED.
-- KEYS[1] stock, KEYS[2] buyers, KEYS[3] pending, KEYS[4] unpub, KEYS[5] orders
-- ARGV[1] user id, ARGV[2] order id, ARGV[3] reserved_at_ms
-- Returns 1 restored, 0 kept. It is kept unless the reservation is still
-- pending AND unpublished with its original timestamp: a different score means
-- the sweeper claimed it and may have published a copy, and then the unit
-- may already be an order: giving it back could sell it twice.
if redis.call('HEXISTS', KEYS[3], ARGV[2]) == 0 then
  return 0
end
local score = redis.call('ZSCORE', KEYS[4], ARGV[2])
if not score or tonumber(score) ~= tonumber(ARGV[3]) then
  return 0
end
redis.call('INCR', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[2])
redis.call('ZREM', KEYS[4], ARGV[2])
-- The order never was: the buyer's status goes back to none.
redis.call('HDEL', KEYS[5], 'o:' .. ARGV[2])
if redis.call('HGET', KEYS[5], 'u:' .. ARGV[1]) == ARGV[2] then
  redis.call('HDEL', KEYS[5], 'u:' .. ARGV[1])
end
-- Producers that answer this item's sold-out requests themselves watch the
-- count (soldout.lua): someone may buy the unit before they see it back.
redis.call('HINCRBY', KEYS[5], 'given_back', 1)
return 1
