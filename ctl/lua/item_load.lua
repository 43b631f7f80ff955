-- Load an item's stock and sale window for a new sale, atomically.
-- KEYS[1] stock, KEYS[2] buyers, KEYS[3] pending, KEYS[4] window, KEYS[5] orders
-- (all tagged {item:ID})
-- ARGV[1] stock, ARGV[2] starts_ms, ARGV[3] ends_ms ('' for none)
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
redis.call('DEL', KEYS[4], KEYS[5])
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[4], 'starts_ms', ARGV[2])
end
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[4], 'ends_ms', ARGV[3])
end
return 1
