-- Drop reservations whose orders the database already holds: the consumer
-- persisted them and died before clearing them.
-- KEYS[1] pending, KEYS[2] unpub; ARGV order ids.
-- Returns how many pending entries were removed. The buyer stays in the
-- buyers set and the stock is untouched: the unit is sold.
local n = 0
for i = 1, #ARGV do
  n = n + redis.call('HDEL', KEYS[1], ARGV[i])
  redis.call('ZREM', KEYS[2], ARGV[i])
end
return n
