-- Load an item's stock for a new sale, atomically.
-- KEYS[1] stock, KEYS[2] buyers, KEYS[3] pending (all tagged {item:ID})
-- ARGV[1] stock
-- Returns 1 when loaded; -1 when reservations are pending and -2 when buyers
-- exist: in both cases orders may still be on their way to the database, and
-- resetting the stock would sell their units twice.
if redis.call('HLEN', KEYS[3]) > 0 then
  return -1
end
if redis.call('SCARD', KEYS[2]) > 0 then
  return -2
end
redis.call('SET', KEYS[1], ARGV[1])
return 1
