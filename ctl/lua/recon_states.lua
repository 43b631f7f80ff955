-- Set the buyers' status of settled orders to what the database says: the
-- consumer persisted or refused them and died before recording it, or Redis
-- lost it. KEYS[1] orders (tagged {item:ID}); ARGV: 6 values per order, as
-- item_rebuild.lua takes them (order id, user id, 'c' or 'r', reserved_ms,
-- settled_ms, reason). Returns how many entries changed.
local n = 0
for i = 1, #ARGV, 6 do
  local oid, user, st = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local want = user .. '|' .. st .. '|' .. ARGV[i + 3] .. '|' .. ARGV[i + 4] .. '|' .. ARGV[i + 5]
  local cur = redis.call('HGET', KEYS[1], 'o:' .. oid)
  -- Only the state and its owner matter; a first settlement's time stays.
  if not cur or string.match(cur, '^([^|]*|%a)|') ~= user .. '|' .. st then
    redis.call('HSET', KEYS[1], 'o:' .. oid, want)
    n = n + 1
  end
  if st == 'c' or redis.call('HEXISTS', KEYS[1], 'u:' .. user) == 0 then
    redis.call('HSET', KEYS[1], 'u:' .. user, oid)
  end
end
return n
