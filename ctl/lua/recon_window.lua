-- Set an item's sale window in Redis to the database's.
-- KEYS[1] window; ARGV[1] starts_ms, ARGV[2] ends_ms ('' for an open end).
redis.call('DEL', KEYS[1])
if ARGV[1] ~= '' then
  redis.call('HSET', KEYS[1], 'starts_ms', ARGV[1])
end
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], 'ends_ms', ARGV[2])
end
return 1
