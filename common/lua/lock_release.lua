-- Release one hold of a lock, only if this owner holds it.
-- KEYS[1] the lock hash; ARGV[1] owner token, ARGV[2] lease in milliseconds.
-- Returns holds left (0 = the lock is free now), or -1 when this owner does not
-- hold it: then nothing is touched, whoever holds it keeps it.
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
  return -1
end
local holds = redis.call('HINCRBY', KEYS[1], 'holds', -1)
if holds <= 0 then
  redis.call('DEL', KEYS[1])
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return holds
