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
local VERSION = 1

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
  local n = 0
  for i = 2, #ARGV - 1, 2 do
    if redis.call('SADD', KEYS[4], ARGV[i]) == 1 then
      redis.call('INCR', KEYS[1])
      if ARGV[1] == '1' then
        redis.call('SREM', KEYS[2], ARGV[i + 1])
      end
      n = n + 1
    end
  end
  if n > 0 then
    redis.call('HINCRBY', KEYS[3], 'given_back', n)
  end
  return n
end

redis.register_function{ function_name = 'seckill_return', callback = give_back }
redis.register_function{ function_name = 'seckill_return_version', callback = function() return VERSION end,
                          flags = { 'no-writes' } }
