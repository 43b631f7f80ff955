-- Acquire (or re-enter) a batch of locks of one group, each atomically, in
-- one script call.
-- KEYS[2i-1] lock i's key <prefix>:lock:{lk:G}:NAME, KEYS[2i] its fence
-- counter <prefix>:fence:{lk:G}:NAME (the same group G for all: one slot).
-- ARGV[1] owner token, ARGV[2] lease in milliseconds, ARGV[3] how long a
-- fence counter is kept, in milliseconds, ARGV[3+i] lock i's request id.
-- Returns three integers per lock: 1, fence, holds when held by this owner;
-- 0, pttl, 0 when another owner holds it.
--
-- A lock is one string, "OWNER REQ HOLDS FENCE", with the lease as its TTL:
-- one SET ... PX writes it and its lease (a hash needed HSET and PEXPIRE,
-- and each command is what Redis pays for).
--
-- The request id makes a retry idempotent: if the reply to an acquire was
-- lost and the client sends it again, the second call reports the same
-- acquisition instead of counting a second hold. It is unique per owner (a
-- counter of the client's), so it is only compared once the owner matched.
--
-- The fence is max(Redis clock in microseconds, last fence + 1). The counter
-- alone would restart from zero after Redis loses its data, and every new
-- fence would then lose against the ones the database already stored; the
-- clock keeps growing across such a loss, so new holders always win and an
-- old holder's fence stays behind theirs.
local token, ttl, keep = ARGV[1], ARGV[2], ARGV[3]
local out, now_us, now_s, n = {}, nil, nil, #KEYS / 2
-- One MGET reads every lock of the call: Redis pays per command, and a
-- command called from Lua costs about as much as the key work it does.
local lk = {}
for i = 1, n do
  lk[i] = KEYS[2 * i - 1]
end
local vals = redis.call('MGET', unpack(lk))
-- What this call wrote, for a name that comes twice in one batch: the second
-- must see the first's acquisition (a re-entry), not the MGET's "free".
local wrote = {}
for i = 1, n do
  local k, req, o = lk[i], ARGV[3 + i], #out
  local v = wrote[k]
  if v == nil then
    v = vals[i]
  end
  if v then
    local owner, vreq, holds, fence = string.match(v, '^(%S+) (%S+) (%d+) (%d+)$')
    if owner == token then
      holds = tonumber(holds)
      if vreq ~= req then
        holds = holds + 1
      end
      -- %d: holds is a Lua number, and tostring() could print 2.0 or 1e+15
      v = owner .. ' ' .. req .. ' ' .. string.format('%d', holds) .. ' ' .. fence
      redis.call('SET', k, v, 'PX', ttl)
      wrote[k] = v
      out[o + 1], out[o + 2], out[o + 3] = 1, tonumber(fence), holds
    else
      out[o + 1], out[o + 2], out[o + 3] = 0, redis.call('PTTL', k), 0
    end
  else
    if now_us == nil then
      local t = redis.call('TIME')
      now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    -- Read and write the counter in one command: write the clock, get the
    -- last fence back. Only when that one is not behind the clock (two
    -- acquisitions in one microsecond, or a clock stepped back) is it
    -- written a second time.
    -- %d: a Lua number passed as an argument would be formatted with %.14g
    -- and lose the low digits of a 16-digit fence.
    local fence, f = now_us, now_s
    if f == nil then
      f = string.format('%d', fence)
      now_s = f
    end
    local last = tonumber(redis.call('SET', KEYS[2 * i], f, 'PX', keep, 'GET') or '0')
    if last >= fence then
      fence = last + 1
      f = string.format('%d', fence)
      redis.call('SET', KEYS[2 * i], f, 'PX', keep)
    end
    v = token .. ' ' .. req .. ' 1 ' .. f
    redis.call('SET', k, v, 'PX', ttl)
    wrote[k] = v
    out[o + 1], out[o + 2], out[o + 3] = 1, fence, 1
  end
end
return out
