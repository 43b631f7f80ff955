-- What a producer needs to keep answering an item's sold-out crowd itself.
-- KEYS[1] stock, KEYS[2] buyers, KEYS[3] orders (all tagged {item:ID})
-- Returns {exists, stock, buyers, given_back}: exists 0 when the item has no
-- stock key (never loaded, or Redis lost it), the units left, how many users
-- hold a unit, and how many units were ever given back (restore.lua counts
-- them). The buyers set can change while the stock stays at zero only by a
-- give-back followed by a purchase, so a moved count says "copy it again".
local stock = redis.call('GET', KEYS[1])
if not stock then
  return {0, 0, 0, 0}
end
return {1, tonumber(stock), redis.call('SCARD', KEYS[2]),
        tonumber(redis.call('HGET', KEYS[3], 'given_back') or '0')}
