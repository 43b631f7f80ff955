#!lua name=seckill_return
-- Units back on sale (issue #44): the consumer calls this once PostgreSQL has
-- expired (or cancelled) an order and given its unit back to stock_left, from
-- the durable record of that return (order_returns).
--
-- A library of its own, loaded and versioned as the others (common/redis/rfunc.h):
-- an operator loads it (`seckillctl functions load`, as the admin user;
-- `scripts/stack up` on the dev stack), the consumer only calls it (FCALL)
-- and refuses to start without it. Every command it runs is checked against
-- the consumer's ACL rules (docs/security.md).
--
-- VERSION grows with every change of a function here, of its body or its
-- contract (read back with seckill_return_version).
local VERSION = 5

-- Each order of ARGV's pairs (order id, user id) not yet in the set
-- returned: added to it, its unit back in stock (when the slot holds the
-- units: stock not nil), its buyer out of buyers when ARGV[1] is '1', and
-- the count given back in orders' given_back. How many.
local function return_each(ARGV, returned, stock, buyers, orders)
  local n = 0
  for i = 2, #ARGV - 1, 2 do
    if redis.call('SADD', returned, ARGV[i]) == 1 then
      if stock then
        redis.call('INCR', stock)
      end
      if ARGV[1] == '1' then
        redis.call('SREM', buyers, ARGV[i + 1])
      end
      n = n + 1
    end
  end
  if n > 0 then
    redis.call('HINCRBY', orders, 'given_back', n)
  end
  return n
end

-- Give the units of returned orders back to the sale, each order once.
-- KEYS[1] stock, KEYS[2] buyers, KEYS[3] orders, KEYS[4] returned (all tagged {item:ID})
-- ARGV[1] '1' to take each buyer's one-per-user mark away (sale.rebuy_after_cancel),
-- then pairs: order id, user id.
-- Returns the units given back by this call (0 when each was given back
-- before: a retry, a replay, two consumers sending one return), or -1 when
-- the item has no stock in Redis (never loaded, or Redis lost it): nothing
-- is written then, for 'seckillctl item load' rebuilds the item from
-- stock_left, which already counts these units.
-- The returned set is what makes it once: SADD answers 1 for an order id the
-- item never gave back. given_back is the count producers watch
-- (producer/soldout.h): a unit back, and a buyer gone from the set, make
-- every producer ask Redis again within its refresh period, the one that
-- answered 410 sold out and the one that remembers the buyer as a winner.
local function give_back(KEYS, ARGV)
  if redis.call('EXISTS', KEYS[1]) == 0 then
    return -1
  end
  return return_each(ARGV, KEYS[4], KEYS[1], KEYS[2], KEYS[3])
end

-- The buyers' half of a return, for an item in buckets (version 5, issue
-- #57: common/sale/bucket.h). Such an item's returned units go to its
-- reserve, the item's own slot (seckill_return there, its flag '0'), while
-- its buyers are in their buckets, each another slot: this call, in the
-- bucket, takes each returned order's buyer out once, with a returned set
-- of the bucket's own as its record, so a retry or a replay never takes out
-- a buyer who has bought again since. A crash between the two calls leaves
-- one done and the other sent again: each is once by its own set.
-- KEYS[1] buyers, KEYS[2] orders, KEYS[3] returned (all tagged {item:ID:S})
-- ARGV[1] '1' to take each buyer's mark away (sale.rebuy_after_cancel),
-- then pairs: order id, user id.
-- Returns the orders released by this call (0: each was before). Each
-- counts in the bucket's given_back, which producers watch over all the
-- item's slots (producer/soldout.h): a buyer gone from a bucket's set while
-- another bucket sells one more leaves the buyers' sum as it was, and the
-- count says it moved.
local function release(KEYS, ARGV)
  return return_each(ARGV, KEYS[3], nil, KEYS[1], KEYS[2])
end

-- seckill_mark reads and writes MARK_CHUNK orders with one HMGET and one
-- HSET, not one of each per order: each command a function calls costs
-- Redis its lookup, checks and argument copies again. The chunk keeps
-- HSET's arguments far below Lua's limit on unpack.
local MARK_CHUNK = 500

-- The new value of one order's field, or nil when the state may not move.
local function marked(cur, st, detail)
  local user, was, rsv, settled = string.match(cur, '^([^|]*)|(%a)|([^|]*)|([^|]*)|')
  local ok = false
  if st == 'w' then
    ok = was == 'q' or was == 'c'
  elseif st == 'p' or st == 'x' or st == 'k' then
    ok = was == 'q' or was == 'c' or was == 'w'
  end
  if ok then
    return user .. '|' .. st .. '|' .. rsv .. '|' .. settled .. '|' .. detail
  end
  return nil
end

-- What became of orders after the sale, for the buyers' status calls
-- (issue #44): PostgreSQL decided it (it is the only authority); this copies
-- the decision into the item's orders hash, whose field o:ID is
-- "user|state|reserved_at_ms|settled_at_ms|detail" (seckill_consumer's
-- settle writes it with state 'q', 'c' or 'r').
-- KEYS[1] orders (tagged {item:ID})
-- ARGV: triples of order id, state, detail:
--   'w' waiting for its payment, detail the end of the window (pay_by, ms)
--   'p' paid, detail when (ms)
--   'x' expired, 'k' cancelled by its buyer, detail when (ms)
-- Returns the number of orders whose state changed.
-- Only forward: 'w' replaces 'q' or 'c' (a settlement that came first);
-- 'p', 'x' and 'k' replace 'q', 'c' or 'w' and are never replaced. An order
-- the hash does not hold (its status expired, or Redis lost it) is left
-- alone: the status call then answers as for any unknown order, and the
-- rebuild restores the states from the database. Safe to repeat.
local function mark(KEYS, ARGV)
  local changed = 0
  for c = 1, #ARGV - 2, 3 * MARK_CHUNK do
    local fields = {}
    for i = c, math.min(c + 3 * MARK_CHUNK, #ARGV + 1) - 3, 3 do
      fields[#fields + 1] = 'o:' .. ARGV[i]
    end
    -- HMGET, not HGET: the consumer's ACL allows the former on the orders
    -- hash (settle reads many at once), and a function runs under it.
    local cur = redis.call('HMGET', KEYS[1], unpack(fields))
    local new, order = {}, {}
    for k = 1, #fields do
      local f, i = fields[k], c + 3 * (k - 1)
      -- An order named twice in a call moves from its first new state.
      local v = new[f] or cur[k]
      local m = v and marked(v, ARGV[i + 1], ARGV[i + 2])
      if m then
        if not new[f] then
          order[#order + 1] = f
        end
        new[f] = m
        changed = changed + 1
      end
    end
    if #order > 0 then
      local set = {}
      for _, f in ipairs(order) do
        set[#set + 1] = f
        set[#set + 1] = new[f]
      end
      redis.call('HSET', KEYS[1], unpack(set))
    end
  end
  return changed
end

redis.register_function{ function_name = 'seckill_return', callback = give_back }
redis.register_function{ function_name = 'seckill_release', callback = release }
redis.register_function{ function_name = 'seckill_mark', callback = mark }
redis.register_function{ function_name = 'seckill_return_version', callback = function() return VERSION end,
                          flags = { 'no-writes' } }
