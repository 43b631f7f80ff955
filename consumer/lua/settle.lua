-- Settle orders the consumer is done with: clear their reservations and
-- record what became of each, for the buyers' status calls.
-- KEYS[1] pending, KEYS[2] unpub, KEYS[3] orders, KEYS[4] stock (all tagged {item:ID})
-- ARGV[1] now_ms, then 5 values per order: order id, user id, state ('c'
-- confirmed in the database, 'r' refused by it), reserved_at_ms, reason
-- ('' when confirmed). Returns the number of orders.
-- Safe to repeat (a replay, a retry after a dropped connection): the first
-- settlement's time stays, and a refusal never overwrites a confirmation.
-- An item whose stock is gone was lost by Redis: recording a status would
-- bring one of its keys back, and 'seckillctl item load' rebuilds only an
-- item Redis holds nothing of. The rebuild restores every status from the
-- database instead.
local live = redis.call('EXISTS', KEYS[4]) == 1
local n = 0
for i = 2, #ARGV, 5 do
  local oid, user, st, rsv, why = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  redis.call('HDEL', KEYS[1], oid)
  redis.call('ZREM', KEYS[2], oid)
  if live then
    local cur = redis.call('HGET', KEYS[3], 'o:' .. oid)
    local was = cur and string.match(cur, '^[^|]*|(%a)|')
    if not was or was == 'q' or (was == 'r' and st == 'c') then
      redis.call('HSET', KEYS[3], 'o:' .. oid, user .. '|' .. st .. '|' .. rsv .. '|' .. ARGV[1] .. '|' .. why)
    end
    -- The user's order for this item: the one they reserved, or the one the
    -- database confirmed (it allows one per user and item).
    local held = redis.call('HGET', KEYS[3], 'u:' .. user)
    if not held or (st == 'c' and held ~= oid) then
      redis.call('HSET', KEYS[3], 'u:' .. user, oid)
    end
  end
  n = n + 1
end
return n
