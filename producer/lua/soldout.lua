-- What a producer needs to keep answering an item's sold-out crowd itself.
-- KEYS[1] stock, KEYS[2] buyers, KEYS[3] orders, KEYS[4] window (all tagged {item:ID})
-- Returns {exists, stock, buyers, given_back, ends_ms, ended}: exists 0 when
-- the item has no stock key (never loaded, or Redis lost it), the units
-- left, how many users hold a unit, how many units were ever given back
-- (restore.lua counts them), the end of the sale window (0: none) and 1 once
-- it is past by Redis's clock (reserve.lua's judge of the window). The buyers
-- set can change while the stock stays at zero only by a give-back followed
-- by a purchase, so a moved count says "copy it again".
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
