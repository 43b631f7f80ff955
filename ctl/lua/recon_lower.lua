-- Lower an item's stock that is higher than its orders allow, only if it
-- still holds the value the check saw: a reservation made since then changed
-- the count, and the check must be run again.
-- KEYS[1] stock; ARGV[1] the value seen, ARGV[2] the value to set (lower).
-- Returns 1 lowered, 0 changed meanwhile.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2])
return 1
