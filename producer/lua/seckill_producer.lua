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
local VERSION = 6

-- The reservation itself, once the item, the window and (for a queued
-- item) the admission have been checked: duplicate, ended, sold out, or
-- reserved (see seckill_reserve's answers). w is the window's {starts_ms,
-- ends_ms}, now Redis's clock in ms (0 when the item has no window).
local function take(KEYS, ARGV, stock, w, now)
  if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then
    return -2
  end
  if w[2] and now >= tonumber(w[2]) then
    return -5
  end
  if w[4] == '1' then
    return -10
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

-- Redis's clock in ms.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Reserve one unit of an item for a user, atomically.
-- KEYS[1] stock, KEYS[2] buyers, KEYS[3] pending, KEYS[4] unpub, KEYS[5] window,
-- KEYS[6] orders (all tagged {item:ID})
-- ARGV[1] user id, ARGV[2] order id, ARGV[3] order message, ARGV[4] reserved_at_ms
-- Returns the codes of RSV_OUTCOMES (producer/reserve.h): 1 reserved (or
-- {1, reserved_at_ms} when the script re-stamped it, see below), -3 unknown
-- item (no stock loaded), {-4, starts_ms} not started, -6 an admission is
-- required (the item has a waiting room: seckill_reserve_admitted takes its
-- buyers), -2 duplicate (the user already holds a unit), -5 ended, -1 sold
-- out; in that order. -10 (version 3, issue #57): the sale is paused
-- (seckillctl item pause: the window hash's paused is '1'), after -5 and
-- before -1: a buyer who holds a unit is still told so, the others to come
-- back (503 with Retry-After); a producer of an older version answers this
-- code it does not know with 503 too.
-- -11 (version 5, issue #57): the item sells from its buckets (the window
-- names them: seckillctl item create --buckets), not from this, its own
-- slot, which only holds their reserve. Checked first, before the stock: a
-- producer that does not know of the buckets yet (it learned the item before
-- they were made, or a producer of an older version, which answers a code it
-- does not know with 503) can never sell the reserve's units here, where the
-- buyer mark would not be the one the bucket checks. A bucket's own window
-- copy never names buckets.
-- Before the opening nobody learns anything else; after the closing a buyer
-- who holds a unit is still told so.
-- -6 came with version 2 (issue #58), for items only a seckillctl of that
-- version makes (their window holds queue_opens_ms): a producer of version 1
-- on this library hears a code its table does not know and answers 503,
-- which is what it must do, for it cannot check an admission; selling such
-- an item without one is what the waiting room exists to prevent. Keys,
-- arguments and every other answer are as they were.
local function reserve(KEYS, ARGV)
  local stock = redis.call('GET', KEYS[1])
  if not stock then
    return -3
  end
  -- The window is decided by Redis's clock alone, so every producer agrees
  -- on the second the sale opens (scripts replicate their effects, not this
  -- call, so TIME is safe here). One HMGET reads the waiting room's mark
  -- too: a sale without one pays nothing more for it.
  local w = redis.call('HMGET', KEYS[5], 'starts_ms', 'ends_ms', 'queue_opens_ms', 'paused', 'buckets')
  if w[5] then
    return -11
  end
  local now = 0
  if w[1] or w[2] then
    now = now_ms()
    if w[1] and now < tonumber(w[1]) then
      return {-4, w[1]}
    end
  end
  if w[3] then
    return -6
  end
  return take(KEYS, ARGV, stock, w, now)
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

-- Transfers between an item's slots (issue #57, common/sale/xfer.h) -------
-- Units move from one slot's stock to another's (the item's own slot and its
-- buckets, bucket.h) in two halves, each one call on its own shard, each
-- recorded under the transfer's id at its own end: a half run again changes
-- nothing, and a crash between the halves is finished from the records (the
-- units in between are counted once, by the source's record). Version 4.

-- A giving half's record, written again as it is. KEYS[1] xout; ARGV[1]
-- transfer id. Returns its units, or 0 when there is no such record. Why
-- write what is there: Redis's WAIT waits for the caller's own last write,
-- and a record someone else wrote, read back by a finisher (or by a mover
-- whose first connection died), may not be on any replica yet; its
-- receiving half must not run before it is (xfer.h), so the reader writes
-- it again and WAITs for that.
local function xfer_hold(KEYS, ARGV)
  local done = redis.call('HGET', KEYS[1], ARGV[1])
  if not done then
    return 0
  end
  redis.call('HSET', KEYS[1], ARGV[1], done)
  return tonumber(string.match(done, ':(%d+)$'))
end

-- The giving half. KEYS[1] stock, KEYS[2] xout (the source slot's)
-- ARGV[1] transfer id, ARGV[2] the destination's salt, ARGV[3] units wanted,
-- ARGV[4] units the source keeps (it gives only what it holds above them).
-- Returns the units given (0: none, and nothing recorded); for an id it
-- recorded before, the units it gave then, the record written again
-- (xfer_hold, above).
local function xfer_out(KEYS, ARGV)
  local held = xfer_hold({ KEYS[2] }, { ARGV[1] })
  if held > 0 then
    return held
  end
  local want, keep = tonumber(ARGV[3]), tonumber(ARGV[4])
  if not want or not keep or want < 1 or keep < 0 then
    return redis.error_reply('ERR seckill_xfer_out: units wanted >= 1, units kept >= 0')
  end
  local n = math.min(want, tonumber(redis.call('GET', KEYS[1]) or '0') - keep)
  if n <= 0 then
    return 0
  end
  redis.call('DECRBY', KEYS[1], n)
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. ':' .. n)
  return n
end

-- The receiving half. KEYS[1] stock, KEYS[2] xin, KEYS[3] orders (the
-- destination slot's; the orders hash unused since version 6, kept: a
-- function's keys never change under its name); ARGV[1] transfer id,
-- ARGV[2] units (as the source recorded them). Returns 1 when applied now, 0 when it was before, -1 when
-- the destination has no stock key (not loaded: units put there would make
-- it look like a sale). given_back stays (version 6; it grew by the units
-- before): it says a unit left a buyer, and a transfer takes none from
-- anyone; every producer's table of winners (producer/winners.h) forgot the
-- item at each refill, and its winners' repeated presses went to Redis
-- again. A producer's sold-out view sees the units land by the stock, and
-- their sale by the buyers (producer/soldout.h).
local function xfer_in(KEYS, ARGV)
  local n = tonumber(ARGV[2])
  if not n or n < 1 then
    return redis.error_reply('ERR seckill_xfer_in: units >= 1')
  end
  if redis.call('EXISTS', KEYS[1]) == 0 then
    return -1
  end
  if redis.call('HSETNX', KEYS[2], ARGV[1], n) == 0 then
    return 0
  end
  redis.call('INCRBY', KEYS[1], n)
  return 1
end

-- The waiting room (issue #58) --------------------------------------------
-- An item created with one (seckillctl item create --queue-opens-at) has
-- queue_opens_ms in its window hash, and these keys beside the sale's, under
-- its hash tag (common/sale/keys.h, KEYS_QUEUE_*): queue, a hash (seed,
-- opened_ms, shuffled, pre_total, late_seq, joined_total, called, serving,
-- admitted_total, passed_total, waiting (as of the last admission step),
-- rate_milli, ceiling_per_s and paused (seckillctl queue), lease);
-- queue:pre, a set (who joined before the opening: equal places);
-- queue:line, a sorted set (the order); queue:seen, a hash (user ->
-- "last_ask_ms:eta_at_ms", the time they were last told their turn would
-- come, 0 for none); queue:adm, a sorted set (user -> the end of their
-- admission, ms: the admissions outstanding); queue:used, a sorted set
-- ("user:nonce" -> the end of that admission: the ones spent).

-- A place in the line is a score. At the opening a member of the pre-queue
-- is placed at the first 13 hex digits of SHA-1(seed ':' user), below 2^52;
-- a later joiner at LATE plus their number of arrival, behind all of them.
-- Everything stays below 2^53, where a double is exact: every producer,
-- Redis and an auditor (seckillctl queue audit) order alike.
local LATE = 4503599627370496

-- A score as Redis must read it back: tostring() would round it (%.14g).
local function fmt(n)
  return string.format('%.0f', n)
end

local function shuffled_score(seed, user)
  return tonumber(string.sub(redis.sha1hex(seed .. ':' .. user), 1, 13), 16)
end

-- Where user stands (after any join): 'pre', a score in the line, or nil
-- (not in the room; or passed over, when asking). m: the queue hash's
-- called, seed.
local function place(KEYS, user, join, now, starts, m)
  local called = tonumber(m[1] or '-1')
  local score = redis.call('ZSCORE', KEYS[7], user)
  if score and tonumber(score) > called then
    return tonumber(score)
  end
  if not score and redis.call('SISMEMBER', KEYS[6], user) == 1 then
    return 'pre'
  end
  -- Not in the room, or called and gone (passed over while away, an
  -- admission spent or run out): a join takes a place at the back.
  if not join then
    return nil
  end
  redis.call('HINCRBY', KEYS[5], 'joined_total', 1)
  -- Before the opening every place is equal. Once the seed is drawn, the
  -- pre-queue is closed even if a clock went back (a failover): a member
  -- added then would never be moved into the line.
  if not m[2] and now < tonumber(starts) then
    redis.call('SADD', KEYS[6], user)
    return 'pre'
  end
  local s = LATE + redis.call('HINCRBY', KEYS[5], 'late_seq', 1)
  redis.call('ZADD', KEYS[7], fmt(s), user)
  return s
end

-- A buyer joins the waiting room (ARGV[2] '1') or asks where they stand ('0').
-- KEYS[1] stock, KEYS[2] buyers, KEYS[3] pending, KEYS[4] window, KEYS[5] queue,
-- KEYS[6] queue:pre, KEYS[7] queue:line, KEYS[8] queue:seen, KEYS[9] queue:adm
-- ARGV[1] user id, ARGV[2] '1' join, '0' ask
-- Returns (producer/wroom.h): -3 unknown item, 0 no waiting room,
-- {-10, queue_opens_ms} not open yet, -5 ended, -2 the user holds a unit,
-- -1 sold out (no unit in Redis and none pending: only a return brings one
-- back; the place is kept), {2, admitted until ms, nonce, starts_ms},
-- {1, position, eta_ms, starts_ms} waiting (position 0: the opening has not
-- placed them yet, every place equal; eta_ms -1: no admission rate yet), 3
-- not in the room (asking only).
-- One place per buyer: a second join, another tab, answers the same place.
-- Every answer but the first five records that the buyer asked (queue:seen):
-- the admission passes over a waiter not seen for longer than the
-- abandonment time.
local function queue(KEYS, ARGV)
  local stock = redis.call('GET', KEYS[1])
  if not stock then
    return -3
  end
  local w = redis.call('HMGET', KEYS[4], 'starts_ms', 'ends_ms', 'queue_opens_ms')
  if not w[3] or not w[1] then
    return 0
  end
  local now = now_ms()
  if now < tonumber(w[3]) then
    return {-10, w[3]}
  end
  if w[2] and now >= tonumber(w[2]) then
    return -5
  end
  local user = ARGV[1]
  if redis.call('SISMEMBER', KEYS[2], user) == 1 then
    return -2
  end
  local sold_out = tonumber(stock) <= 0 and redis.call('HLEN', KEYS[3]) == 0
  local till = redis.call('ZSCORE', KEYS[9], user)
  if till and tonumber(till) > now and not sold_out then
    local nonce = redis.call('ZSCORE', KEYS[7], user)
    if nonce then
      redis.call('HSET', KEYS[8], user, now .. ':0')
      return {2, till, nonce, w[1], now}
    end
  end
  local m = redis.call('HMGET', KEYS[5], 'called', 'seed', 'rate_milli', 'shuffled')
  local at = place(KEYS, user, ARGV[2] == '1', now, w[1], m)
  -- Sold out is told to everyone who asks, in the room or not; a place is
  -- kept (a join takes one), for a unit may come back.
  if at and (sold_out or at == 'pre') then
    redis.call('HSET', KEYS[8], user, now .. ':0')
  end
  if sold_out then
    return -1
  elseif not at then
    return 3
  elseif at == 'pre' then
    return {1, 0, -1, w[1]}
  end
  local pos = redis.call('ZCOUNT', KEYS[7], '(' .. fmt(tonumber(m[1] or '-1')), fmt(at))
  -- A late joiner while the opening still moves the pre-queue: all of it
  -- goes ahead.
  if m[4] ~= '1' and at >= LATE then
    pos = pos + redis.call('SCARD', KEYS[6])
  end
  local rate, eta = tonumber(m[3] or '0'), -1
  if rate > 0 then
    eta = math.floor(pos * 1000000 / rate)
  end
  redis.call('HSET', KEYS[8], user, now .. ':' .. (eta >= 0 and fmt(now + eta) or '0'))
  return {1, pos, eta, w[1]}
end

-- The opening: from starts_ms (Redis's clock) the pre-queue is shuffled into
-- the line, a bounded number of members per call so that Redis never stalls
-- long; the producers call it until nothing is left.
-- KEYS[1] window, KEYS[2] queue, KEYS[3] queue:pre, KEYS[4] queue:line
-- ARGV[1] a seed (hex, from a CSPRNG), ARGV[2] most members to move now
-- Returns {0} no waiting room, {-4, starts_ms} not yet, or {1, seed, drawn,
-- moved, left}: the seed stored (the first one offered: every producer then
-- places alike), drawn 1 when ARGV[1] became it, how many this call moved,
-- how many are left to move (0: the line is whole; admission may begin).
local function queue_open(KEYS, ARGV)
  local w = redis.call('HMGET', KEYS[1], 'starts_ms', 'queue_opens_ms')
  if not w[1] or not w[2] then
    return {0}
  end
  local now = now_ms()
  if now < tonumber(w[1]) then
    return {-4, w[1]}
  end
  local drawn = redis.call('HSETNX', KEYS[2], 'seed', ARGV[1])
  if drawn == 1 then
    redis.call('HSET', KEYS[2], 'opened_ms', now)
  end
  local seed = redis.call('HGET', KEYS[2], 'seed')
  local moved = redis.call('SPOP', KEYS[3], tonumber(ARGV[2]))
  -- ZADD in chunks: unpack() has a limit, and one command per member would
  -- cost Redis a lookup and a reply each.
  for i = 1, #moved, 500 do
    local args = {}
    for j = i, math.min(i + 499, #moved) do
      args[#args + 1] = fmt(shuffled_score(seed, moved[j]))
      args[#args + 1] = moved[j]
    end
    redis.call('ZADD', KEYS[4], unpack(args))
  end
  if #moved > 0 then
    redis.call('HINCRBY', KEYS[2], 'pre_total', #moved)
  end
  local left = redis.call('SCARD', KEYS[3])
  if left == 0 then
    redis.call('HSET', KEYS[2], 'shuffled', 1)
  end
  return {1, seed, drawn, #moved, left}
end

-- The lease of the item's admission: "owner|until_ms" in the queue hash. 1
-- when ARGV[1] holds it (or it lapsed: taken), 0 when another holds it.
local function lease(KEYS, ARGV, held, now)
  if held then
    local owner, till = string.match(held, '^(.*)|(%d+)$')
    if owner ~= ARGV[1] and till and tonumber(till) > now then
      return 0
    end
  end
  redis.call('HSET', KEYS[4], 'lease', ARGV[1] .. '|' .. fmt(now + tonumber(ARGV[2])), 'rate_milli', ARGV[8])
  return 1
end

-- Call the next places: each one seen lately is admitted until
-- now + ARGV[4], the others are passed over. Returns admitted, passed, the
-- new boundary, and the sum and count of the admitted ones' ETA errors.
local function call_places(KEYS, ARGV, n, called, now)
  local admitted, passed, looked, err_sum, err_n = 0, 0, 0, 0, 0
  local limit, till, away = tonumber(ARGV[7]), fmt(now + tonumber(ARGV[4])), now - tonumber(ARGV[5])
  while admitted < n and looked < limit do
    local batch = redis.call('ZRANGEBYSCORE', KEYS[5], '(' .. fmt(called), '+inf', 'WITHSCORES', 'LIMIT', 0,
                             math.min(n - admitted, limit - looked))
    if #batch == 0 then
      break
    end
    for i = 1, #batch, 2 do
      local user = batch[i]
      called = tonumber(batch[i + 1])
      looked = looked + 1
      local at, eta = string.match(redis.call('HGET', KEYS[6], user) or '', '^(%d+):(%d+)$')
      if not at or tonumber(at) < away then
        passed = passed + 1
      else
        redis.call('ZADD', KEYS[7], till, user)
        admitted = admitted + 1
        if tonumber(eta) > 0 then
          err_sum = err_sum + math.abs(now - tonumber(eta))
          err_n = err_n + 1
        end
      end
    end
  end
  return admitted, passed, called, err_sum, err_n
end

-- One step of an item's admission, taken by the producer that holds its
-- lease (one admitter at a time; another takes over once the lease lapses).
-- KEYS[1] stock, KEYS[2] pending, KEYS[3] window, KEYS[4] queue, KEYS[5] queue:line,
-- KEYS[6] queue:seen, KEYS[7] queue:adm, KEYS[8] queue:used, KEYS[9] queue:pre
-- ARGV[1] the caller's id, ARGV[2] lease ms, ARGV[3] most to admit now,
-- ARGV[4] an admission's life ms, ARGV[5] away ms (a waiter not seen for longer
-- is passed over), ARGV[6] margin percent, ARGV[7] most places to look at,
-- ARGV[8] the admission rate measured (per 1000 s), for the waiters' ETAs.
-- Admits at most as many as the stock, plus the margin, leaves room for
-- beside the admissions outstanding: so when units come back (an expiry, a
-- cancel), admission reopens for that many. Admits nobody before the line is
-- whole (the opening), while the room or the sale is paused, after the window
-- or at no stock.
-- Returns {holder, admitted, passed, waiting, stock, pending, outstanding,
-- serving, ceiling_per_s, paused, lapsed, eta_err_ms_sum, eta_err_n,
-- shuffled, pre}, or {-1} when the item has no waiting room: holder 0 when
-- another producer holds the lease (nothing done; the rest as it stands).
local function queue_admit(KEYS, ARGV)
  local w = redis.call('HMGET', KEYS[3], 'starts_ms', 'ends_ms', 'queue_opens_ms', 'paused')
  if not w[3] then
    return {-1}
  end
  local now = now_ms()
  local m = redis.call('HMGET', KEYS[4], 'lease', 'called', 'serving', 'ceiling_per_s', 'paused', 'shuffled')
  local stock = tonumber(redis.call('GET', KEYS[1]) or '0')
  local called = tonumber(m[2] or '-1')
  local holder = lease(KEYS, ARGV, m[1], now)
  local admitted, passed, lapsed, err_sum, err_n = 0, 0, 0, 0, 0
  if holder == 1 then
    -- Admissions run out (slots back) and spent ones past their end (a
    -- token that old is refused as expired before Redis is asked).
    lapsed = redis.call('ZREMRANGEBYSCORE', KEYS[7], '-inf', now)
    redis.call('ZREMRANGEBYSCORE', KEYS[8], '-inf', now)
    -- Nobody is admitted while the room or the sale is paused (queue pause,
    -- item pause).
    local open = m[6] == '1' and m[5] ~= '1' and w[4] ~= '1' and not (w[2] and now >= tonumber(w[2]))
    local room = stock + math.ceil(stock * tonumber(ARGV[6]) / 100) - redis.call('ZCARD', KEYS[7])
    local n = math.min(tonumber(ARGV[3]), room)
    if open and stock > 0 and n > 0 then
      admitted, passed, called, err_sum, err_n = call_places(KEYS, ARGV, n, called, now)
    end
    if admitted + passed > 0 then
      redis.call('HSET', KEYS[4], 'called', fmt(called))
      redis.call('HINCRBY', KEYS[4], 'serving', admitted + passed)
      redis.call('HINCRBY', KEYS[4], 'admitted_total', admitted)
      redis.call('HINCRBY', KEYS[4], 'passed_total', passed)
    end
  end
  local serving = tonumber(m[3] or '0') + admitted + passed
  local waiting = redis.call('ZCOUNT', KEYS[5], '(' .. fmt(called), '+inf')
  if holder == 1 then
    -- For seckillctl queue status, which reads the hash alone.
    redis.call('HSET', KEYS[4], 'waiting', waiting)
  end
  return {holder, admitted, passed, waiting, stock,
          redis.call('HLEN', KEYS[2]), redis.call('ZCARD', KEYS[7]), serving, tonumber(m[4] or '0'),
          m[5] == '1' and 1 or 0, lapsed, err_sum, err_n, m[6] == '1' and 1 or 0,
          redis.call('SCARD', KEYS[9])}
end

-- Reserve for a buyer the waiting room admitted, spending the admission.
-- KEYS[1..6] as seckill_reserve's, KEYS[7] queue:adm, KEYS[8] queue:used
-- ARGV[1..4] as seckill_reserve's, then what the admission token names (the
-- producer checked its MAC, item, buyer and end): ARGV[5] the sale's
-- starts_ms, ARGV[6] the admission's end (ms), ARGV[7] its nonce
-- Returns seckill_reserve's answers but -6, and: -9 the admission is for
-- another sale (the item was created again since, or has no waiting room
-- now), -7 it was spent already, -8 it is not outstanding (run out by
-- Redis's clock, or its slot given to the next in line).
-- The admission is spent by the call that finds it good, whatever the
-- reservation then answers (a duplicate, sold out, ended): no reservation
-- without spending one, and never two on one. A paused sale (-10) answers
-- before that: the admission stays outstanding for the resume.
local function reserve_admitted(KEYS, ARGV)
  local stock = redis.call('GET', KEYS[1])
  if not stock then
    return -3
  end
  local w = redis.call('HMGET', KEYS[5], 'starts_ms', 'ends_ms', 'queue_opens_ms', 'paused')
  if not w[3] or w[1] ~= ARGV[5] then
    return -9
  end
  local now = now_ms()
  if now < tonumber(w[1]) then
    return {-4, w[1]}
  end
  -- Paused: the admission is kept for the resume (not spent here).
  if w[4] == '1' then
    return -10
  end
  local spent = ARGV[1] .. ':' .. ARGV[7]
  if redis.call('ZSCORE', KEYS[8], spent) then
    return -7
  end
  local till = redis.call('ZSCORE', KEYS[7], ARGV[1])
  if not till or tonumber(till) ~= tonumber(ARGV[6]) or tonumber(till) <= now then
    return -8
  end
  redis.call('ZREM', KEYS[7], ARGV[1])
  redis.call('ZADD', KEYS[8], ARGV[6], spent)
  return take(KEYS, ARGV, stock, w, now)
end

redis.register_function{ function_name = 'seckill_reserve', callback = reserve }
redis.register_function{ function_name = 'seckill_restore', callback = restore }
redis.register_function{ function_name = 'seckill_soldout', callback = soldout, flags = { 'no-writes' } }
redis.register_function{ function_name = 'seckill_sweep_claim', callback = sweep_claim }
redis.register_function{ function_name = 'seckill_xfer_out', callback = xfer_out }
redis.register_function{ function_name = 'seckill_xfer_in', callback = xfer_in }
redis.register_function{ function_name = 'seckill_xfer_hold', callback = xfer_hold }
redis.register_function{ function_name = 'seckill_queue', callback = queue }
redis.register_function{ function_name = 'seckill_queue_open', callback = queue_open }
redis.register_function{ function_name = 'seckill_queue_admit', callback = queue_admit }
redis.register_function{ function_name = 'seckill_reserve_admitted', callback = reserve_admitted }
redis.register_function{ function_name = 'seckill_producer_version', callback = function() return VERSION end,
                          flags = { 'no-writes' } }
