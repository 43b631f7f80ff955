-- Rebuild an item's Redis state from the database after Redis lost it.
-- KEYS[1] stock, KEYS[2] buyers, KEYS[3] pending, KEYS[4] unpub, KEYS[5] window,
-- KEYS[6] orders
-- ARGV[1] stock (units not yet sold), ARGV[2] starts_ms, ARGV[3] ends_ms
-- ('' for an open end), then 6 values per settled order: order id, user id,
-- state ('c' persisted, 'r' refused), reserved_ms, settled_ms, reason.
-- Returns 1 rebuilt, or -1 when any of the keys exists: Redis was not empty
-- for this item after all (or someone rebuilt it meanwhile), and writing over
-- live reservations could sell a unit twice.
for i = 1, 6 do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    return -1
  end
end
for i = 4, #ARGV, 6 do
  local oid, user, st = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  redis.call('HSET', KEYS[6], 'o:' .. oid,
             user .. '|' .. st .. '|' .. ARGV[i + 3] .. '|' .. ARGV[i + 4] .. '|' .. ARGV[i + 5])
  -- The buyers are the users holding an order; a refused order names its
  -- user only when they hold nothing else.
  if st == 'c' then
    redis.call('SADD', KEYS[2], user)
    redis.call('HSET', KEYS[6], 'u:' .. user, oid)
  elseif redis.call('HEXISTS', KEYS[6], 'u:' .. user) == 0 then
    redis.call('HSET', KEYS[6], 'u:' .. user, oid)
  end
end
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[5], 'starts_ms', ARGV[2])
end
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[5], 'ends_ms', ARGV[3])
end
redis.call('SET', KEYS[1], ARGV[1])
return 1
