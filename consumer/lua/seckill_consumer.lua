#!lua name=seckill_consumer
-- The consumer's function (issue #34): settling orders.
--
-- Redis functions, not scripts: an operator loads them (`seckillctl
-- functions load`, as the admin user; `scripts/stack up` on the dev stack),
-- and the consumer calls them by name (FCALL): no daemon's user may load code.
-- KEYS and ARGV are each function's two parameters, as they were a script's
-- globals. Every command a function runs is still checked against the
-- caller's ACL rules: a function is no way around them (docs/security.md).
--
-- VERSION grows with every change of a function here, of its body or its
-- contract; a program refuses to start against an older library, whose
-- version it reads with seckill_consumer_version (common/redis/rfunc.h). A function's keys
-- and arguments never change under its name (a new contract is a new name),
-- so that the programs of the last release keep working on a newer library
-- while they are upgraded one by one.
local VERSION = 2

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
-- A call carries a whole batch's orders of one item: each command takes all
-- of them at once (HDEL, ZREM, HMGET, HSET with many fields) instead of six
-- commands per order. The decisions are still made order by order, in
-- argument order, on a table of the fields as they stand so far: an order
-- that appears twice (a backlog retried with a new batch) is decided the
-- second time on what the first time wrote, as if each had run alone.
local function settle(KEYS, ARGV)
  local CHUNK = 1000 -- values per command: unpack() is limited to a few thousand
  local function each(cmd, key, list)
    for j = 1, #list, CHUNK do
      redis.call(cmd, key, unpack(list, j, math.min(j + CHUNK - 1, #list)))
    end
  end
  local function fetch(key, fields, into)
    for j = 1, #fields, CHUNK do
      local vals = redis.call('HMGET', key, unpack(fields, j, math.min(j + CHUNK - 1, #fields)))
      for k = 1, #vals do
        if into[fields[j + k - 1]] == nil then
          into[fields[j + k - 1]] = vals[k]
        end
      end
    end
  end

  local n = (#ARGV - 1) / 5
  local oids, ofields, ufields = {}, {}, {}
  for i = 1, n do
    local b = 2 + 5 * (i - 1)
    oids[i] = ARGV[b]
    ofields[i] = 'o:' .. ARGV[b]
    ufields[i] = 'u:' .. ARGV[b + 1]
  end
  each('HDEL', KEYS[1], oids)
  each('ZREM', KEYS[2], oids)
  if redis.call('EXISTS', KEYS[4]) == 1 then
    local cur = {} -- field -> value (false: absent)
    fetch(KEYS[3], ofields, cur)
    fetch(KEYS[3], ufields, cur)
    local function state_of(v)
      return v and string.match(v, '^[^|]*|(%a)|')
    end
    -- Whether an order's field says the database confirmed it and the buyer
    -- still holds it: 'c', 'w' (waiting for its payment) or 'p' (paid).
    local function live(v)
      local s = state_of(v)
      return s == 'c' or s == 'w' or s == 'p'
    end
    -- The field of the order a buyer's pointer names: read here, once, only
    -- when the pointer might move (rare: a buyer's second order).
    local function field_of(held)
      local f = 'o:' .. held
      if cur[f] == nil then
        cur[f] = redis.call('HMGET', KEYS[3], f)[1]
      end
      return cur[f]
    end
    local dirty, set = {}, {}
    local function put(f, v)
      cur[f] = v
      if not dirty[f] then
        dirty[f] = true
        set[#set + 1] = f
      end
    end
    for i = 1, n do
      local b = 2 + 5 * (i - 1)
      local oid, user, st, rsv, why = ARGV[b], ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4]
      local c = cur[ofields[i]]
      local was = c and string.match(c, '^[^|]*|(%a)|')
      if not was or was == 'q' or (was == 'r' and st == 'c') then
        put(ofields[i], user .. '|' .. st .. '|' .. rsv .. '|' .. ARGV[1] .. '|' .. why)
      end
      -- The user's order for this item: the one they reserved, or the one the
      -- database confirmed (it allows one live order per user and item).
      -- Confirmed means confirmed now: an old order replayed or settled late
      -- comes as a duplicate ('c') while its field says it expired or was
      -- cancelled since, and the buyer may hold a newer order; the pointer
      -- moves to it only from an order that holds nothing for the buyer (one
      -- queued, refused, expired or cancelled; version 1 moved it back).
      local held = cur[ufields[i]]
      if not held then
        put(ufields[i], oid)
      elseif st == 'c' and held ~= oid and live(cur[ofields[i]]) and not live(field_of(held)) then
        put(ufields[i], oid)
      end
    end
    local pairs_ = {}
    for _, f in ipairs(set) do
      pairs_[#pairs_ + 1] = f
      pairs_[#pairs_ + 1] = cur[f]
    end
    each('HSET', KEYS[3], pairs_)
  end
  return n
end

redis.register_function{ function_name = 'seckill_settle', callback = settle }
redis.register_function{ function_name = 'seckill_consumer_version', callback = function() return VERSION end,
                          flags = { 'no-writes' } }
