-- Reserve one unit of an item for a user, atomically.
-- KEYS[1] stock, KEYS[2] buyers, KEYS[3] pending, KEYS[4] unpub, KEYS[5] window,
-- KEYS[6] orders (all tagged {item:ID})
-- ARGV[1] user id, ARGV[2] order id, ARGV[3] order message, ARGV[4] reserved_at_ms
-- Returns the codes of RSV_OUTCOMES (producer/reserve.h): 1 reserved (or
-- {1, reserved_at_ms} when the script re-stamped it, see below), -3 unknown
-- item (no stock loaded), {-4, starts_ms} not started, -2 duplicate (the user
-- already holds a unit), -5 ended, -1 sold out; in that order.
-- Before the opening nobody learns anything else; after the closing a buyer
-- who holds a unit is still told so.
local stock = redis.call('GET', KEYS[1])
if not stock then
  return -3
end
-- The window is decided by Redis's clock alone, so every producer agrees
-- on the second the sale opens (scripts replicate their effects, not this
-- call, so TIME is safe here).
local w = redis.call('HMGET', KEYS[5], 'starts_ms', 'ends_ms')
local now = 0
if w[1] or w[2] then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if w[1] and now < tonumber(w[1]) then
    return {-4, w[1]}
  end
end
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then
  return -2
end
if w[2] and now >= tonumber(w[2]) then
  return -5
end
if tonumber(stock) <= 0 then
  return -1
end
-- The producer stamps a batch before sending it, so a stamp can precede the
-- opening that Redis has just decided is past: such a reservation is made
-- now, and its order says so (never reserved before starts_at).
local at, msg = ARGV[4], ARGV[3]
if w[1] and tonumber(at) < tonumber(w[1]) then
  at = tostring(now)
  msg = string.gsub(msg, '"reserved_at_ms":%d+', '"reserved_at_ms":' .. at, 1)
end
redis.call('DECR', KEYS[1])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[2], msg)
-- Unpublished until Kafka acknowledges it; the sweeper re-publishes what
-- stays here longer than its age.
redis.call('ZADD', KEYS[4], at, ARGV[2])
-- Queued, for the buyer's status calls; the consumer settles it.
redis.call('HSET', KEYS[6], 'u:' .. ARGV[1], ARGV[2], 'o:' .. ARGV[2], ARGV[1] .. '|q|' .. at .. '||')
if at ~= ARGV[4] then
  return {1, at}
end
return 1
