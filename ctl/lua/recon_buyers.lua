-- Add buyers the set lost (their orders exist, or are reserved).
-- KEYS[1] buyers; ARGV user ids. Returns how many were missing.
local n = 0
for i = 1, #ARGV do
  n = n + redis.call('SADD', KEYS[1], ARGV[i])
end
return n
