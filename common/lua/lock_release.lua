-- Release one hold of each of a batch of locks of one group, only where
-- this owner holds them.
-- KEYS[i] lock i's key, "OWNER REQ HOLDS FENCE" (one group: one slot);
-- ARGV[1] owner token, ARGV[1+i] lock i's lease in milliseconds.
-- Returns per lock the holds left (0 = the lock is free now), or -1 when
-- this owner does not hold it: then nothing is touched, whoever holds it
-- keeps it.
--
-- One MGET reads them all and one DEL frees those whose last hold this was:
-- Redis pays per command, and a command called from Lua costs about as much
-- as the key work it does.
local mine, out, dels = ARGV[1] .. ' ', {}, {}
local vals = redis.call('MGET', unpack(KEYS))
-- What this call changed, for a lock that comes twice in one batch (two
-- holds of it released at once): the second must see the first's release.
local now = {}
for i = 1, #KEYS do
  local k = KEYS[i]
  local v = now[k]
  if v == nil then
    v = vals[i]
  end
  if not v or string.sub(v, 1, #mine) ~= mine then
    out[i] = -1
  else
    -- Only the hold count, in the common case: the last hold goes.
    local holds = tonumber(string.match(v, ' (%d+) %d+$')) - 1
    if holds <= 0 then
      dels[#dels + 1] = k
      now[k] = false
      out[i] = 0
    else
      local req, fence = string.match(v, '^%S+ (%S+) %d+ (%d+)$')
      v = mine .. req .. ' ' .. string.format('%d', holds) .. ' ' .. fence
      redis.call('SET', k, v, 'PX', ARGV[1 + i])
      now[k] = v
      out[i] = holds
    end
  end
end
if #dels > 0 then
  redis.call('DEL', unpack(dels))
end
return out
