#!lua name=seckill_lock
-- The distributed lock's functions (issue #34, common/sale/lock.h): the
-- consumer's, and seckillctl lock's.
--
-- Redis functions, not scripts: an operator loads them (`seckillctl
-- functions load`, as the admin user; `scripts/stack up` on the dev stack),
-- and every program that locks calls them by name (FCALL): no daemon's
-- user may load code.
-- KEYS and ARGV are each function's two parameters, as they were a script's
-- globals. Every command a function runs is still checked against the
-- caller's ACL rules: a function is no way around them (docs/security.md).
--
-- VERSION grows with every change of a function here, of its body or its
-- contract; a program refuses to start against an older library, whose
-- version it reads with seckill_lock_version (common/redis/rfunc.h). A function's keys
-- and arguments never change under its name (a new contract is a new name),
-- so that the programs of the last release keep working on a newer library
-- while they are upgraded one by one.
local VERSION = 1

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
-- it, as a key's TTL would, judged here and in seckill_lock_extend. One group,
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
local function lock_acquire(KEYS, ARGV)
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
end

-- Renew the leases of a batch of locks of one group, each only if this
-- owner still holds it.
-- KEYS[1] the group's hash (see seckill_lock_acquire); ARGV[1] owner token,
-- ARGV[2] how long the group outlives its last write, in milliseconds; then
-- the n lock names, then their n leases in milliseconds.
-- Returns per lock 1 when renewed, 0 when the lock is free, held by someone
-- else or its lease already ran out (never revives it: a renewal racing a
-- release leaves nothing behind, and a lease that ran out stays lost).
local function lock_extend(KEYS, ARGV)
  local h, mine, keep = KEYS[1], ARGV[1] .. ' ', tonumber(ARGV[2])
  local n = (#ARGV - 2) / 2
  local fields = { '{kept}' }
  for i = 1, n do
    fields[i + 1] = ARGV[2 + i]
  end
  local vals = redis.call('HMGET', h, unpack(fields))
  local t = redis.call('TIME')
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local out, set = {}, {}
  for i = 1, n do
    local v = vals[i + 1]
    out[i] = 0
    if v and string.sub(v, 1, #mine) == mine then
      local head, e = string.match(v, '^(.* %d+) (%d+)$')
      if e and tonumber(e) > now_ms then
        set[#set + 1] = ARGV[2 + i]
        set[#set + 1] = head .. ' ' .. string.format('%d', now_ms + tonumber(ARGV[2 + n + i]))
        out[i] = 1
      end
    end
  end
  if #set > 0 then
    -- A lock held and renewed for longer than keep, with no acquisition in
    -- its group meanwhile, must not lose its hash: the same rule as there.
    local refresh = tonumber(vals[1] or '0') - now_ms < keep / 2
    if refresh then
      set[#set + 1], set[#set + 2] = '{kept}', string.format('%d', now_ms + keep)
    end
    redis.call('HSET', h, unpack(set))
    if refresh then
      redis.call('PEXPIRE', h, keep)
    end
  end
  return out
end

-- Release one hold of each of a batch of locks of one group, only where
-- this owner holds them.
-- KEYS[1] the group's hash (see seckill_lock_acquire); ARGV[1] owner token, then
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
local function lock_release(KEYS, ARGV)
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
end

redis.register_function{ function_name = 'seckill_lock_acquire', callback = lock_acquire }
redis.register_function{ function_name = 'seckill_lock_extend', callback = lock_extend }
redis.register_function{ function_name = 'seckill_lock_release', callback = lock_release }
redis.register_function{ function_name = 'seckill_lock_version', callback = function() return VERSION end,
                          flags = { 'no-writes' } }
