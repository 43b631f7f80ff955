-- Claim reservations that stayed unpublished too long, for re-publishing.
-- KEYS[1] unpub, KEYS[2] pending (tagged {item:ID})
-- ARGV[1] cutoff (reserved or claimed at or before it), ARGV[2] now, ARGV[3] limit
-- Returns a flat array: order id, message, order id, message, ...
-- A claim moves the score to now: the original producer can then no longer
-- give the unit back (see restore.lua), and another sweeper skips it until
-- the age passes again.
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[3])
local out = {}
for _, id in ipairs(ids) do
  local msg = redis.call('HGET', KEYS[2], id)
  if msg then
    redis.call('ZADD', KEYS[1], 'XX', ARGV[2], id)
    out[#out + 1] = id
    out[#out + 1] = msg
  else
    -- Already persisted and cleared by the consumer: nothing to publish.
    redis.call('ZREM', KEYS[1], id)
  end
end
return out
