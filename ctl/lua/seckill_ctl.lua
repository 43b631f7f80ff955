#!lua name=seckill_ctl
-- seckillctl's functions (issue #34): loading, rebuilding and reconciling
-- an item.
--
-- Redis functions, not scripts: an operator loads them (`seckillctl
-- functions load`, as the admin user; `scripts/stack up` on the dev stack),
-- and seckillctl calls them by name (FCALL): no daemon's user may load code.
-- KEYS and ARGV are each function's two parameters, as they were a script's
-- globals. Every command a function runs is still checked against the
-- caller's ACL rules: a function is no way around them (docs/security.md).
--
-- VERSION grows with every change of a function here, of its body or its
-- contract; a program refuses to start against an older library, whose
-- version it reads with seckill_ctl_version (common/redis/rfunc.h). A function's keys
-- and arguments never change under its name (a new contract is a new name),
-- so that the programs of the last release keep working on a newer library
-- while they are upgraded one by one.
local VERSION = 6

-- Load an item's stock and sale window for a new sale, atomically.
-- KEYS[1] stock, KEYS[2] buyers, KEYS[3] pending, KEYS[4] window, KEYS[5] orders
-- (all tagged {item:ID})
-- ARGV[1] stock, ARGV[2] starts_ms, ARGV[3] ends_ms ('' for none)
-- Returns 1 when loaded; -1 when reservations are pending and -2 when buyers
-- exist: in both cases orders may still be on their way to the database, and
-- resetting the stock would sell their units twice.
local function item_load(KEYS, ARGV)
  if redis.call('HLEN', KEYS[3]) > 0 then
    return -1
  end
  if redis.call('SCARD', KEYS[2]) > 0 then
    return -2
  end
  redis.call('SET', KEYS[1], ARGV[1])
  redis.call('DEL', KEYS[4], KEYS[5])
  -- The give-back count first, before any buyer's entry: a producer reads
  -- it on every sold-out check (seckill_soldout), and a small hash is a
  -- listpack Redis searches from the front, so a field that is not there
  -- yet costs a walk past every buyer's two (4 us of a 15 us check at ~300
  -- fields, INFO commandstats), one at the front almost nothing.
  redis.call('HSET', KEYS[5], 'given_back', 0)
  if ARGV[2] ~= '' then
    redis.call('HSET', KEYS[4], 'starts_ms', ARGV[2])
  end
  if ARGV[3] ~= '' then
    redis.call('HSET', KEYS[4], 'ends_ms', ARGV[3])
  end
  return 1
end

-- Replace a window hash with the given fields (issue #57: a bucket's copy
-- of its item's window, ctl/itembk.h), atomically: a buy in the bucket reads
-- the old copy or the new one, never one half written.
-- KEYS[1] the bucket's window hash
-- ARGV field, value, ... (none: the hash is removed)
-- Returns the number of fields written.
local function window_put(KEYS, ARGV)
  redis.call('DEL', KEYS[1])
  if #ARGV > 0 then
    redis.call('HSET', KEYS[1], unpack(ARGV))
  end
  return #ARGV / 2
end

-- Rebuild an item's Redis state from the database after Redis lost it.
-- KEYS[1] stock, KEYS[2] buyers, KEYS[3] pending, KEYS[4] unpub, KEYS[5] window,
-- KEYS[6] orders
-- ARGV[1] stock (units not yet sold), ARGV[2] starts_ms, ARGV[3] ends_ms
-- ('' for an open end), then 6 values per settled order: order id, user id,
-- state ('c' persisted, 'r' refused), reserved_ms, settled_ms, reason.
-- Returns 1 rebuilt, or -1 when any of the keys exists: Redis was not empty
-- for this item after all (or someone rebuilt it meanwhile), and writing over
-- live reservations could sell a unit twice.
local function item_rebuild(KEYS, ARGV)
  for i = 1, 6 do
    if redis.call('EXISTS', KEYS[i]) == 1 then
      return -1
    end
  end
  -- First, as seckill_item_load writes it: the units given back before the
  -- loss are not known, and none are in the database's orders.
  redis.call('HSET', KEYS[6], 'given_back', 0)
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
end

-- An order state of the orders hash that holds a unit (issue #44): 'c'
-- persisted (no payment step), 'w' waiting for its payment, 'p' paid. 'x'
-- expired and 'k' cancelled gave theirs back; 'r' never had one.
local function holds_unit(st)
  return st == 'c' or st == 'w' or st == 'p'
end

-- Rebuild an item's Redis state from the database after Redis lost it, with
-- the states after the sale (issue #44). seckill_item_rebuild's contract,
-- plus:
-- KEYS[7] returned (the ids of the orders whose unit went back)
-- ARGV[4] '1' when a buyer whose order expired or was cancelled may buy
-- again (sale.rebuy_after_cancel): then such a buyer is not put back in the
-- buyers set; '0': they are, as seckill_return leaves them. Then 6 values
-- per settled order, whose state may also be 'w', 'p', 'x' or 'k' (as
-- seckill_mark writes them: the detail is pay_by, or when it changed).
-- The returned set becomes the expired and cancelled orders: the caller
-- rebuilds only once every return is done (order_returns), so stock_left,
-- which becomes the stock, counts each of their units, and the set makes a
-- return sent again give nothing. It is replaced, not checked: it may have
-- outlived the other keys, and the database says what it must hold.
-- Returns 1 rebuilt, or -1 when any of the first six keys exists.
local function item_rebuild2(KEYS, ARGV)
  for i = 1, 6 do
    if redis.call('EXISTS', KEYS[i]) == 1 then
      return -1
    end
  end
  redis.call('DEL', KEYS[7])
  redis.call('HSET', KEYS[6], 'given_back', 0)
  for i = 5, #ARGV, 6 do
    local oid, user, st = ARGV[i], ARGV[i + 1], ARGV[i + 2]
    redis.call('HSET', KEYS[6], 'o:' .. oid,
               user .. '|' .. st .. '|' .. ARGV[i + 3] .. '|' .. ARGV[i + 4] .. '|' .. ARGV[i + 5])
    local back = st == 'x' or st == 'k'
    if back then
      redis.call('SADD', KEYS[7], oid)
    end
    if holds_unit(st) or (back and ARGV[4] == '0') then
      redis.call('SADD', KEYS[2], user)
    end
    -- u:USER leads to the order the buyer holds; to another only when
    -- they hold none.
    if holds_unit(st) or redis.call('HEXISTS', KEYS[6], 'u:' .. user) == 0 then
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
end

-- seckill_recon_snapshot with KEYS[7] returned: its members come last.
local function recon_snapshot2(KEYS, ARGV)
  return {
    redis.call('GET', KEYS[1]),
    redis.call('HGETALL', KEYS[3]),
    redis.call('SMEMBERS', KEYS[2]),
    redis.call('ZRANGE', KEYS[4], 0, -1, 'WITHSCORES'),
    redis.call('HMGET', KEYS[5], 'starts_ms', 'ends_ms'),
    redis.call('HGETALL', KEYS[6]),
    redis.call('SMEMBERS', KEYS[7]),
  }
end

-- An item's Redis state at one instant, for reconciliation.
-- KEYS[1] stock, KEYS[2] buyers, KEYS[3] pending, KEYS[4] unpub, KEYS[5] window,
-- KEYS[6] orders
-- Returns {stock or false, {order id, message, ...}, {user id, ...},
--          {order id, reserved_at_ms, ...}, {starts_ms or false, ends_ms or false},
--          {field, value, ...} of the orders hash}.
-- One script, so no reservation can move between the reads.
local function recon_snapshot(KEYS, ARGV)
  return {
    redis.call('GET', KEYS[1]),
    redis.call('HGETALL', KEYS[3]),
    redis.call('SMEMBERS', KEYS[2]),
    redis.call('ZRANGE', KEYS[4], 0, -1, 'WITHSCORES'),
    redis.call('HMGET', KEYS[5], 'starts_ms', 'ends_ms'),
    redis.call('HGETALL', KEYS[6]),
  }
end

-- Drop reservations whose orders the database already holds: the consumer
-- persisted them and died before clearing them.
-- KEYS[1] pending, KEYS[2] unpub; ARGV order ids.
-- Returns how many pending entries were removed. The buyer stays in the
-- buyers set and the stock is untouched: the unit is sold.
local function recon_drop(KEYS, ARGV)
  local n = 0
  for i = 1, #ARGV do
    n = n + redis.call('HDEL', KEYS[1], ARGV[i])
    redis.call('ZREM', KEYS[2], ARGV[i])
  end
  return n
end

-- Add buyers the set lost (their orders exist, or are reserved).
-- KEYS[1] buyers; ARGV user ids. Returns how many were missing.
local function recon_buyers(KEYS, ARGV)
  local n = 0
  for i = 1, #ARGV do
    n = n + redis.call('SADD', KEYS[1], ARGV[i])
  end
  return n
end

-- Lower an item's stock that is higher than its orders allow, only if it
-- still holds the value the check saw: a reservation made since then changed
-- the count, and the check must be run again.
-- KEYS[1] stock; ARGV[1] the value seen, ARGV[2] the value to set (lower).
-- Returns 1 lowered, 0 changed meanwhile.
local function recon_lower(KEYS, ARGV)
  if redis.call('GET', KEYS[1]) ~= ARGV[1] then
    return 0
  end
  redis.call('SET', KEYS[1], ARGV[2])
  return 1
end

-- Set an item's sale window in Redis to the database's.
-- KEYS[1] window; ARGV[1] starts_ms, ARGV[2] ends_ms ('' for an open end).
local function recon_window(KEYS, ARGV)
  redis.call('DEL', KEYS[1])
  if ARGV[1] ~= '' then
    redis.call('HSET', KEYS[1], 'starts_ms', ARGV[1])
  end
  if ARGV[2] ~= '' then
    redis.call('HSET', KEYS[1], 'ends_ms', ARGV[2])
  end
  return 1
end

-- seckill_recon_window with the other fields the hash holds (version 5): the
-- payment window, the waiting room's opening and the pause, all in one call,
-- so that no buyer meets the hash half written. The first version emptied the
-- hash and the other fields came back one call later each: for that moment a
-- paused sale was open, and a queued item's buyers needed no admission.
-- KEYS[1] window; ARGV[1] starts_ms, ARGV[2] ends_ms, ARGV[3] pay_within_s,
-- ARGV[4] queue_opens_ms, ARGV[5] paused ('1'); '' for each the item has none
-- of (that field is removed).
local WINDOW_FIELDS = { 'starts_ms', 'ends_ms', 'pay_within_s', 'queue_opens_ms', 'paused' }
local function recon_window2(KEYS, ARGV)
  for i, field in ipairs(WINDOW_FIELDS) do
    if ARGV[i] == '' then
      redis.call('HDEL', KEYS[1], field)
    else
      redis.call('HSET', KEYS[1], field, ARGV[i])
    end
  end
  return 1
end

-- Set the buyers' status of settled orders to what the database says: the
-- consumer persisted or refused them and died before recording it, or Redis
-- lost it. KEYS[1] orders (tagged {item:ID}); ARGV: 6 values per order, as
-- seckill_item_rebuild takes them (order id, user id, 'c' or 'r', reserved_ms,
-- settled_ms, reason), or seckill_item_rebuild2 (a state after the sale, 'w',
-- 'p', 'x' or 'k', with its detail). Returns how many entries changed.
local function recon_states(KEYS, ARGV)
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
    if holds_unit(st) or redis.call('HEXISTS', KEYS[1], 'u:' .. user) == 0 then
      redis.call('HSET', KEYS[1], 'u:' .. user, oid)
    end
  end
  return n
end

-- A live stock change (issue #57; ctl/stockchg.h): move the item's stock by
-- ARGV[2] units (> 0 added, < 0 withdrawn) once per change id ARGV[1],
-- recorded in the changes hash (id -> units) in the same call.
-- KEYS[1] stock, KEYS[2] changes, KEYS[3] orders (all tagged {item:ID})
-- Returns {1, stock after} applied now; {0, stock} the id was applied
-- before; {-1, stock} a withdrawal of more units than the stock holds
-- (only units no one holds are there: nothing changed); {-2, units} the id
-- was recorded with other units (nothing changed); {-3, 0} no stock: the
-- item is not loaded. Units added count as given back (the orders hash's
-- given_back): a producer that knows the item sold out watches that count
-- to copy its buyers again, as when a unit comes back.
local function stock_change(KEYS, ARGV)
  local seen = redis.call('HGET', KEYS[2], ARGV[1])
  if seen then
    if seen ~= ARGV[2] then
      return {-2, tonumber(seen)}
    end
    return {0, tonumber(redis.call('GET', KEYS[1]) or '0')}
  end
  local stock = redis.call('GET', KEYS[1])
  if not stock then
    return {-3, 0}
  end
  local n = tonumber(ARGV[2])
  if n < 0 and tonumber(stock) < -n then
    return {-1, tonumber(stock)}
  end
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
  if n > 0 then
    redis.call('HINCRBY', KEYS[3], 'given_back', n)
  end
  return {1, redis.call('INCRBY', KEYS[1], n)}
end

-- seckill_recon_snapshot2 with the window's paused too ({starts_ms,
-- ends_ms, paused}, each false when absent), and KEYS[8] changes: its fields
-- and values (change id, units, ...) come last (issue #57).
local function recon_snapshot3(KEYS, ARGV)
  local snap = recon_snapshot2(KEYS, ARGV)
  snap[5] = redis.call('HMGET', KEYS[5], 'starts_ms', 'ends_ms', 'paused')
  snap[8] = redis.call('HGETALL', KEYS[8])
  return snap
end

redis.register_function{ function_name = 'seckill_item_load', callback = item_load }
redis.register_function{ function_name = 'seckill_item_rebuild', callback = item_rebuild }
redis.register_function{ function_name = 'seckill_item_rebuild2', callback = item_rebuild2 }
redis.register_function{ function_name = 'seckill_recon_snapshot', callback = recon_snapshot,
                         flags = { 'no-writes' } }
redis.register_function{ function_name = 'seckill_recon_snapshot2', callback = recon_snapshot2,
                         flags = { 'no-writes' } }
redis.register_function{ function_name = 'seckill_recon_snapshot3', callback = recon_snapshot3,
                          flags = { 'no-writes' } }
redis.register_function{ function_name = 'seckill_recon_drop', callback = recon_drop }
redis.register_function{ function_name = 'seckill_stock_change', callback = stock_change }
redis.register_function{ function_name = 'seckill_recon_buyers', callback = recon_buyers }
redis.register_function{ function_name = 'seckill_recon_lower', callback = recon_lower }
redis.register_function{ function_name = 'seckill_recon_window', callback = recon_window }
redis.register_function{ function_name = 'seckill_recon_window2', callback = recon_window2 }
redis.register_function{ function_name = 'seckill_recon_states', callback = recon_states }
redis.register_function{ function_name = 'seckill_window_put', callback = window_put }
redis.register_function{ function_name = 'seckill_ctl_version', callback = function() return VERSION end,
                          flags = { 'no-writes' } }
