-- Reserve one unit of an item for a user, atomically.
-- KEYS[1] stock, KEYS[2] buyers, KEYS[3] pending, KEYS[4] unpub (all tagged {item:ID})
-- ARGV[1] user id, ARGV[2] order id, ARGV[3] order message, ARGV[4] reserved_at_ms
-- Returns 1 reserved, -1 sold out, -2 duplicate (the user already holds a
-- unit), -3 unknown item (no stock loaded).
local stock = redis.call('GET', KEYS[1])
if not stock then
  return -3
end
-- Duplicate before sold out: a buyer who already has a unit is told so.
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then
  return -2
end
if tonumber(stock) <= 0 then
  return -1
end
redis.call('DECR', KEYS[1])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[2], ARGV[3])
-- Unpublished until Kafka acknowledges it; the sweeper re-publishes what
-- stays here longer than its age.
redis.call('ZADD', KEYS[4], ARGV[4], ARGV[2])
return 1
