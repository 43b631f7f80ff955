-- Acquire (or re-enter) a batch of locks of one group, each atomically, in
-- one script call.
-- KEYS[1] the group's hash <prefix>:lock:{lk:G}: one field per lock held
-- (named after the lock), plus "{fence}", the last fence handed out in the
-- group, and "{kept}", until when (Redis ms) the hash's own TTL was last set
-- (braces are never part of a lock name).
-- ARGV[1] owner token, ARGV[2] lease in milliseconds, ARGV[3] how long the
-- group outlives its last write, in milliseconds; then the n lock names,
-- then their n request ids.
-- Returns three integers per lock: 1, fence, holds when held by this owner;
-- 0, lease left in ms, 0 when another owner holds it.
--
-- A lock is one field, "OWNER REQ HOLDS FENCE EXPIRES", EXPIRES the end of
-- its lease in Redis milliseconds: a lease ends when the Redis clock passes
-- it, as a key's TTL would, judged here and in lock_extend.lua. One group,
-- one hash: a call costs HMGET, TIME and HSET whatever its number of locks,
-- where a key per lock cost a SET (with its expiry) per lock, and Redis pays
-- per command: a command called from Lua costs about as much as the key work
-- it does.
--
-- The request id makes a retry idempotent: if the reply to an acquire was
-- lost and the client sends it again, the second call reports the same
-- acquisition instead of counting a second hold. It is unique per owner (a
-- counter of the client's), so it is only compared once the owner matched.
--
-- A fresh lock's fence is max(Redis clock in microseconds, the group's last
-- fence + 1): larger than any fence the group ever handed out, so larger
-- than any earlier fence of that name. A counter alone would restart from
-- zero after Redis loses its data, and every new fence would then lose
-- against the ones the database already stored; the clock keeps growing
-- across such a loss, so new holders always win and an old holder's fence
-- stays behind theirs. The fresh locks of one call share a fence: they are
-- different names.
local h, token, ttl, keep = KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local n = (#ARGV - 3) / 2
local fields = { '{fence}', '{kept}' }
for i = 1, n do
  fields[i + 2] = ARGV[3 + i]
end
local vals = redis.call('HMGET', h, unpack(fields))
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- %d: a Lua number passed as an argument would be formatted with %.14g and
-- lose the low digits of a 16-digit fence or a 13-digit time.
local expires = string.format('%d', now_ms + ttl)
local last = tonumber(vals[1] or '0')
local fence, f = nil, nil
local out, set, wrote = {}, {}, {}
for i = 1, n do
  local name, req, o = ARGV[3 + i], ARGV[3 + n + i], #out
  -- What this call wrote, for a name that comes twice in one batch: the
  -- second must see the first's acquisition (a re-entry), not the HMGET's.
  local v = wrote[name]
  if v == nil then
    v = vals[i + 2]
  end
  local owner, vreq, holds, vf, e
  if v then
    owner, vreq, holds, vf, e = string.match(v, '^(%S+) (%S+) (%d+) (%d+) (%d+)$')
  end
  if owner and tonumber(e) > now_ms then
    if owner == token then
      holds = tonumber(holds)
      if vreq ~= req then
        holds = holds + 1
      end
      v = owner .. ' ' .. req .. ' ' .. string.format('%d', holds) .. ' ' .. vf .. ' ' .. expires
      set[#set + 1], set[#set + 2] = name, v
      wrote[name] = v
      out[o + 1], out[o + 2], out[o + 3] = 1, tonumber(vf), holds
    else
      out[o + 1], out[o + 2], out[o + 3] = 0, tonumber(e) - now_ms, 0
    end
  else
    -- Free, or a lease that ran out (its holder died or was cut off): the
    -- field is overwritten. Its fence is below the group's, unless the
    -- group's was lost on its own; max() covers that too.
    if vf and tonumber(vf) > last then
      last = tonumber(vf)
      fence = nil
    end
    if fence == nil then
      fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
      if last >= fence then
        fence = last + 1
      end
      last = fence
      f = string.format('%d', fence)
    end
    v = token .. ' ' .. req .. ' 1 ' .. f .. ' ' .. expires
    set[#set + 1], set[#set + 2] = name, v
    wrote[name] = v
    out[o + 1], out[o + 2], out[o + 3] = 1, fence, 1
  end
end
if #set > 0 then
  if f then
    set[#set + 1], set[#set + 2] = '{fence}', f
  end
  -- The hash outlives its last write by about keep (between keep/2 and
  -- keep): PEXPIRE only when half of that is used up, not on every call.
  local refresh = tonumber(vals[2] or '0') - now_ms < keep / 2
  if refresh then
    set[#set + 1], set[#set + 2] = '{kept}', string.format('%d', now_ms + keep)
  end
  redis.call('HSET', h, unpack(set))
  if refresh then
    redis.call('PEXPIRE', h, keep)
  end
end
return out
