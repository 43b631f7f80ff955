-- Release one hold of each of a batch of locks of one group, only where
-- this owner holds them.
-- KEYS[1] the group's hash (see lock_acquire.lua); ARGV[1] owner token, then
-- the n lock names.
-- Returns per lock the holds left (0 = the lock is free now), or -1 when
-- this owner does not hold it: then nothing is touched, whoever holds it
-- keeps it.
--
-- One HMGET reads them all and one HDEL frees those whose last hold this
-- was. A hold given back keeps the lease's end as it is: the watchdog
-- renews it. No TIME here: an entry of ours whose lease ran out while nobody
-- took the lock is freed like a held one (nobody else held it meanwhile;
-- the holder learnt of the lapse from its watchdog, lock_lost()).
local h, mine = KEYS[1], ARGV[1] .. ' '
local n = #ARGV - 1
local vals = redis.call('HMGET', h, unpack(ARGV, 2))
-- What this call changed, for a lock that comes twice in one batch (two
-- holds of it released at once): the second must see the first's release.
local now, out, dels, set = {}, {}, {}, {}
for i = 1, n do
  local name = ARGV[1 + i]
  local v = now[name]
  if v == nil then
    v = vals[i]
  end
  if not v or string.sub(v, 1, #mine) ~= mine then
    out[i] = -1
  else
    local req, holds, rest = string.match(v, '^%S+ (%S+) (%d+) (%d+ %d+)$')
    holds = tonumber(holds) - 1
    if holds <= 0 then
      dels[#dels + 1] = name
      now[name] = false
      out[i] = 0
    else
      v = mine .. req .. ' ' .. string.format('%d', holds) .. ' ' .. rest
      set[#set + 1], set[#set + 2] = name, v
      now[name] = v
      out[i] = holds
    end
  end
end
-- A name released twice in one call, first a hold, then the last one, is
-- in both lists: the HDEL after the HSET makes the last word count.
if #set > 0 then
  redis.call('HSET', h, unpack(set))
end
if #dels > 0 then
  redis.call('HDEL', h, unpack(dels))
end
return out
