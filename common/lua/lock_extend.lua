-- Renew the lease of a lock, only if this owner still holds it.
-- KEYS[1] the lock hash; ARGV[1] owner token, ARGV[2] lease in milliseconds.
-- Returns 1 when renewed, 0 when the lock is gone or held by someone else
-- (never recreates it: a renewal racing a release leaves no key behind).
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
