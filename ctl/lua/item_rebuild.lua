-- Rebuild an item's Redis state from the database after Redis lost it.
-- KEYS[1] stock, KEYS[2] buyers, KEYS[3] pending, KEYS[4] unpub
-- ARGV[1] stock (units not yet sold), ARGV[2..] the users holding an order.
-- Returns 1 rebuilt, or -1 when any of the keys exists: Redis was not empty
-- for this item after all (or someone rebuilt it meanwhile), and writing over
-- live reservations could sell a unit twice.
for i = 1, 4 do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    return -1
  end
end
for i = 2, #ARGV, 1000 do
  redis.call('SADD', KEYS[2], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
redis.call('SET', KEYS[1], ARGV[1])
return 1
