-- Release one hold of each of a batch of locks of one group, only where
-- this owner holds them.
-- KEYS[i] lock i's hash (one group: one slot); ARGV[1] owner token,
-- ARGV[1+i] lock i's lease in milliseconds.
-- Returns per lock the holds left (0 = the lock is free now), or -1 when
-- this owner does not hold it: then nothing is touched, whoever holds it
-- keeps it.
local token, out = ARGV[1], {}
for i = 1, #KEYS do
  local h = redis.call('HMGET', KEYS[i], 'owner', 'holds')
  if h[1] ~= token then
    out[i] = -1
  else
    local holds = tonumber(h[2]) - 1
    if holds <= 0 then
      redis.call('DEL', KEYS[i])
      out[i] = 0
    else
      redis.call('HSET', KEYS[i], 'holds', holds)
      redis.call('PEXPIRE', KEYS[i], ARGV[1 + i])
      out[i] = holds
    end
  end
end
return out
