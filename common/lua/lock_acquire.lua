-- Acquire (or re-enter) a lock, atomically, in one round trip.
-- KEYS[1] the lock hash <prefix>:lock:{NAME}; KEYS[2] its fence counter <prefix>:fence:{NAME}
-- ARGV[1] owner token, ARGV[2] lease in milliseconds, ARGV[3] request id,
-- ARGV[4] how long the fence counter is kept, in milliseconds.
-- Returns {1, fence, holds} when held by this owner, {0, pttl} when another owner holds it.
--
-- The request id makes a retry idempotent: if the reply to an acquire was
-- lost and the client sends it again, the second call reports the same
-- acquisition instead of counting a second hold.
--
-- The fence is max(Redis clock in microseconds, last fence + 1). The counter
-- alone would restart from zero after Redis loses its data, and every new
-- fence would then lose against the ones the database already stored; the
-- clock keeps growing across such a loss, so new holders always win and an
-- old holder's fence stays behind theirs.
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner == ARGV[1] then
  if redis.call('HGET', KEYS[1], 'req') ~= ARGV[3] then
    redis.call('HINCRBY', KEYS[1], 'holds', 1)
    redis.call('HSET', KEYS[1], 'req', ARGV[3])
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('HGET', KEYS[1], 'fence')), tonumber(redis.call('HGET', KEYS[1], 'holds'))}
end
if owner then
  return {0, redis.call('PTTL', KEYS[1])}
end
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
local fence = now_us
if last >= fence then
  fence = last + 1
end
-- %d: a Lua number passed as an argument would be formatted with %.14g and
-- lose the low digits of a 16-digit fence.
local f = string.format('%d', fence)
redis.call('SET', KEYS[2], f, 'PX', ARGV[4])
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'holds', 1, 'fence', f, 'req', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, fence, 1}
