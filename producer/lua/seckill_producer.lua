#!lua name=seckill_producer
-- The producer's functions (issue #34): reserve, give back, the sold-out
-- check, and the sweeper's claim (seckillctl sweep and reconcile run it too).
--
-- Redis functions, not scripts: an operator loads them (`seckillctl
-- functions load`, as the admin user; `scripts/stack up` on the dev stack),
-- and the producer calls them by name (FCALL): no daemon's user may load code.
-- KEYS and ARGV are each function's two parameters, as they were a script's
-- globals. Every command a function runs is still checked against the
-- caller's ACL rules: a function is no way around them (docs/security.md).
--
-- VERSION grows with every change of a function here, of its body or its
-- contract; a program refuses to start against an older library, whose
-- version it reads with seckill_producer_version (common/redis/rfunc.h). A function's keys
-- and arguments never change under its name (a new contract is a new name),
-- so that the programs of the last release keep working on a newer library
-- while they are upgraded one by one.
local VERSION = 1

-- Reserve one unit of an item for a user, atomically.
-- KEYS[1] stock, KEYS[2] buyers, KEYS[3] pending, KEYS[4] unpub, KEYS[5] window,
-- KEYS[6] orders (all tagged {item:ID})
-- ARGV[1] user id, ARGV[2] order id, ARGV[3] order message, ARGV[4] reserved_at_ms
-- Returns the codes of RSV_OUTCOMES (producer/reserve.h): 1 reserved (or
-- {1, reserved_at_ms} when the script re-stamped it, see below), -3 unknown
-- item (no stock loaded), {-4, starts_ms} not started, -2 duplicate (the user
-- already holds a unit), -5 ended, -1 sold out; in that order.
-- Before the opening nobody learns anything else; after the closing a buyer
-- who holds a unit is still told so.
local function reserve(KEYS, ARGV)
  local stock = redis.call('GET', KEYS[1])
  if not stock then
    return -3
  end
  -- The window is decided by Redis's clock alone, so every producer agrees
  -- on the second the sale opens (scripts replicate their effects, not this
  -- call, so TIME is safe here).
  local w = redis.call('HMGET', KEYS[5], 'starts_ms', 'ends_ms')
  local now = 0
  if w[1] or w[2] then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    if w[1] and now < tonumber(w[1]) then
      return {-4, w[1]}
    end
  end
  if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then
    return -2
  end
  if w[2] and now >= tonumber(w[2]) then
    return -5
  end
  if tonumber(stock) <= 0 then
    return -1
  end
  -- The producer stamps a batch before sending it, so a stamp can precede the
  -- opening that Redis has just decided is past: such a reservation is made
  -- now, and its order says so (never reserved before starts_at).
  local at, msg = ARGV[4], ARGV[3]
  if w[1] and tonumber(at) < tonumber(w[1]) then
    at = tostring(now)
    msg = string.gsub(msg, '"reserved_at_ms":%d+', '"reserved_at_ms":' .. at, 1)
  end
  redis.call('DECR', KEYS[1])
  redis.call('SADD', KEYS[2], ARGV[1])
  redis.call('HSET', KEYS[3], ARGV[2], msg)
  -- Unpublished until Kafka acknowledges it; the sweeper re-publishes what
  -- stays here longer than its age.
  redis.call('ZADD', KEYS[4], at, ARGV[2])
  -- Queued, for the buyer's status calls; the consumer settles it.
  redis.call('HSET', KEYS[6], 'u:' .. ARGV[1], ARGV[2], 'o:' .. ARGV[2], ARGV[1] .. '|q|' .. at .. '||')
  if at ~= ARGV[4] then
    return {1, at}
  end
  return 1
end

-- Give a reservation back: Kafka reported the order NOT_PERSISTED.
-- KEYS[1] stock, KEYS[2] buyers, KEYS[3] pending, KEYS[4] unpub, KEYS[5] orders
-- ARGV[1] user id, ARGV[2] order id, ARGV[3] reserved_at_ms
-- Returns 1 restored, 0 kept. It is kept unless the reservation is still
-- pending AND unpublished with its original timestamp: a different score means
-- the sweeper claimed it and may have published a copy, and then the unit
-- may already be an order: giving it back could sell it twice.
local function restore(KEYS, ARGV)
  if redis.call('HEXISTS', KEYS[3], ARGV[2]) == 0 then
    return 0
  end
  local score = redis.call('ZSCORE', KEYS[4], ARGV[2])
  if not score or tonumber(score) ~= tonumber(ARGV[3]) then
    return 0
  end
  redis.call('INCR', KEYS[1])
  redis.call('SREM', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[2])
  redis.call('ZREM', KEYS[4], ARGV[2])
  -- The order never was: the buyer's status goes back to none.
  redis.call('HDEL', KEYS[5], 'o:' .. ARGV[2])
  if redis.call('HGET', KEYS[5], 'u:' .. ARGV[1]) == ARGV[2] then
    redis.call('HDEL', KEYS[5], 'u:' .. ARGV[1])
  end
  -- Producers that answer this item's sold-out requests themselves watch the
  -- count (seckill_soldout): someone may buy the unit before they see it back.
  redis.call('HINCRBY', KEYS[5], 'given_back', 1)
  return 1
end

-- What a producer needs to keep answering an item's sold-out crowd itself.
-- KEYS[1] stock, KEYS[2] buyers, KEYS[3] orders, KEYS[4] window (all tagged {item:ID})
-- Returns {exists, stock, buyers, given_back, ends_ms, ended}: exists 0 when
-- the item has no stock key (never loaded, or Redis lost it), the units
-- left, how many users hold a unit, how many units were ever given back
-- (seckill_restore counts them), the end of the sale window (0: none) and 1 once
-- it is past by Redis's clock (seckill_reserve's judge of the window). The buyers
-- set can change while the stock stays at zero only by a give-back followed
-- by a purchase, so a moved count says "copy it again".
local function soldout(KEYS, ARGV)
  local stock = redis.call('GET', KEYS[1])
  if not stock then
    return {0, 0, 0, 0, 0, 0}
  end
  local ends = tonumber(redis.call('HGET', KEYS[4], 'ends_ms') or '0')
  local ended = 0
  if ends > 0 then
    local t = redis.call('TIME')
    if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) >= ends then
      ended = 1
    end
  end
  return {1, tonumber(stock), redis.call('SCARD', KEYS[2]),
          tonumber(redis.call('HGET', KEYS[3], 'given_back') or '0'), ends, ended}
end

-- Claim reservations that stayed unpublished too long, for re-publishing.
-- KEYS[1] unpub, KEYS[2] pending (tagged {item:ID})
-- ARGV[1] cutoff (reserved or claimed at or before it), ARGV[2] now, ARGV[3] limit
-- Returns a flat array: order id, message, order id, message, ...
-- A claim moves the score to now: the original producer can then no longer
-- give the unit back (see seckill_restore), and another sweeper skips it until
-- the age passes again.
local function sweep_claim(KEYS, ARGV)
  local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[3])
  local out = {}
  for _, id in ipairs(ids) do
    local msg = redis.call('HGET', KEYS[2], id)
    if msg then
      redis.call('ZADD', KEYS[1], 'XX', ARGV[2], id)
      out[#out + 1] = id
      out[#out + 1] = msg
    else
      -- Already persisted and cleared by the consumer: nothing to publish.
      redis.call('ZREM', KEYS[1], id)
    end
  end
  return out
end

redis.register_function{ function_name = 'seckill_reserve', callback = reserve }
redis.register_function{ function_name = 'seckill_restore', callback = restore }
redis.register_function{ function_name = 'seckill_soldout', callback = soldout, flags = { 'no-writes' } }
redis.register_function{ function_name = 'seckill_sweep_claim', callback = sweep_claim }
redis.register_function{ function_name = 'seckill_producer_version', callback = function() return VERSION end,
                          flags = { 'no-writes' } }
