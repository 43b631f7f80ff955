-- Release one hold of each of a batch of locks of one group, only where
-- this owner holds them.
-- KEYS[i] lock i's key, "OWNER REQ HOLDS FENCE" (one group: one slot);
-- ARGV[1] owner token, ARGV[1+i] lock i's lease in milliseconds.
-- Returns per lock the holds left (0 = the lock is free now), or -1 when
-- this owner does not hold it: then nothing is touched, whoever holds it
-- keeps it.
local token, out = ARGV[1], {}
local mine = token .. ' '
for i = 1, #KEYS do
  local v = redis.call('GET', KEYS[i])
  if not v or string.sub(v, 1, #mine) ~= mine then
    out[i] = -1
  else
    local req, holds, fence = string.match(v, '^%S+ (%S+) (%d+) (%d+)$')
    holds = tonumber(holds) - 1
    if holds <= 0 then
      redis.call('DEL', KEYS[i])
      out[i] = 0
    else
      redis.call('SET', KEYS[i], mine .. req .. ' ' .. string.format('%d', holds) .. ' ' .. fence, 'PX', ARGV[1 + i])
      out[i] = holds
    end
  end
end
return out
