-- Renew the leases of a batch of locks of one group, each only if this
-- owner still holds it.
-- KEYS[1] the group's hash (see lock_acquire.lua); ARGV[1] owner token,
-- ARGV[2] how long the group outlives its last write, in milliseconds; then
-- the n lock names, then their n leases in milliseconds.
-- Returns per lock 1 when renewed, 0 when the lock is free, held by someone
-- else or its lease already ran out (never revives it: a renewal racing a
-- release leaves nothing behind, and a lease that ran out stays lost).
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
