-- Renew the leases of a batch of locks of one group, each only if this
-- owner still holds it.
-- KEYS[i] lock i's key, "OWNER REQ HOLDS FENCE" (one group: one slot);
-- ARGV[1] owner token, ARGV[1+i] lock i's lease in milliseconds.
-- Returns per lock 1 when renewed, 0 when the lock is gone or held by
-- someone else (never recreates it: a renewal racing a release leaves no key
-- behind). One MGET reads them all (see lock_release.lua).
local mine, out = ARGV[1] .. ' ', {}
local vals = redis.call('MGET', unpack(KEYS))
for i = 1, #KEYS do
  local v = vals[i]
  if v and string.sub(v, 1, #mine) == mine then
    redis.call('PEXPIRE', KEYS[i], ARGV[1 + i])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
