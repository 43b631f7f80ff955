-- wrk script for a sale of many items (bench/zipf): exactly REQUESTS buy
-- requests in all, split over the THREADS threads, each at an item drawn by
-- Zipf's law (rank r with probability r^-S / H, rank 1 the hottest; item id
-- ITEM0 + r) from a user drawn uniformly from USERS, with that user's bearer
-- token: TOKENS is a file of one token a line, line N for the run's user N.
--
-- wrk stops by duration, not by count, so a thread that has sent its quota
-- sends GET /healthz instead (never a buy, answered 200, which no buy is)
-- until every buy it sent is answered; then it touches MARKS/done.ID and
-- stops. Its first buy touches MARKS/start.ID: the run's clock is the files'
-- times. The caller interrupts wrk (SIGINT) once every thread is done.
--
-- done() prints "key value" lines: status CODE N (buys only), sent N,
-- answered N, fillers N (the GETs), errors_KIND N, sent_rank RANK N (buys
-- per item), accepted ORDER_ID (one a 202), p50_us, p99_us, duration_us.
-- A 202 names its order but not its item, and response() is not told which
-- request it answers, so 202s are told apart by order id: the caller finds
-- each in PostgreSQL.
local items = tonumber(os.getenv("ITEMS") or "1000")
local item0 = tonumber(os.getenv("ITEM0") or error("ITEM0: item ids are ITEM0 + rank"))
local s = tonumber(os.getenv("S") or "1")
local users = tonumber(os.getenv("USERS") or "200000")
local total = tonumber(os.getenv("REQUESTS") or "1000000")
local nthr = tonumber(os.getenv("THREADS") or "1")
local path = os.getenv("TOKENS") or error("TOKENS: a file of tokens, line N for user N")
local marks = os.getenv("MARKS") or error("MARKS: a folder for the start and done files")
local threads = {}
local nthreads = 0

function setup(thread)
  nthreads = nthreads + 1
  thread:set("id", nthreads)
  table.insert(threads, thread)
end

local function touch(name)
  assert(io.open(marks .. "/" .. name .. "." .. id, "w")):close()
end

function init(args)
  math.randomseed(os.time() * 1000 + id)
  tokens = {}
  local f = assert(io.open(path, "r"))
  for t in f:lines() do tokens[#tokens + 1] = "Bearer " .. t end
  f:close()
  assert(#tokens >= users, string.format("%s has %d tokens, USERS is %d", path, #tokens, users))
  -- The CDF once, here; each request is a binary search over it.
  cdf = {}
  local h = 0
  for r = 1, items do
    h = h + r ^ -s
    cdf[r] = h
  end
  for r = 1, items do cdf[r] = cdf[r] / h end
  cdf[items] = 1
  -- wrk.format does not merge wrk.headers into the table it is given.
  headers = { ["Content-Type"] = "application/json", ["Host"] = wrk.headers["Host"] }
  bodies = {}
  for r = 1, items do bodies[r] = string.format('{"item_id":%.0f}', item0 + r) end
  filler = wrk.format("GET", "/healthz", { ["Host"] = wrk.headers["Host"] })
  -- The remainder goes to the first threads: the quotas add up to REQUESTS.
  quota = math.floor(total / nthr) + ((id <= total % nthr) and 1 or 0)
  statuses, sent_rank, accepted = {}, {}, {}
  for r = 1, items do sent_rank[r] = 0 end
  sent, answered, fillers = 0, 0, 0
  -- wrk calls request() once on the first thread before the run, to check
  -- what it returns, and never sends that one.
  checking = id == 1
end

local function rank(u)
  local lo, hi = 1, items
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if cdf[mid] < u then lo = mid + 1 else hi = mid end
  end
  return lo
end

function request()
  if checking then
    checking = false
    return filler
  end
  if sent >= quota then
    return filler
  end
  if sent == 0 then touch("start") end
  sent = sent + 1
  local r = rank(math.random())
  sent_rank[r] = sent_rank[r] + 1
  headers["Authorization"] = tokens[math.random(1, users)]
  return wrk.format("POST", "/api/v1/seckill", headers, bodies[r])
end

function response(status, headers, body)
  if status == 200 then
    fillers = fillers + 1
    return
  end
  statuses[status] = (statuses[status] or 0) + 1
  answered = answered + 1
  if status == 202 then
    accepted[#accepted + 1] = body:match('"order_id":"(%d+)"') or "?"
  end
  if answered == quota then
    touch("done")
    wrk.thread:stop()
  end
end

function done(summary, latency, requests)
  local all, ranks = {}, {}
  local n = { sent = 0, answered = 0, fillers = 0 }
  for r = 1, items do ranks[r] = 0 end
  for _, t in ipairs(threads) do
    for k, v in pairs(t:get("statuses")) do all[k] = (all[k] or 0) + v end
    for k in pairs(n) do n[k] = n[k] + t:get(k) end
    for r, v in ipairs(t:get("sent_rank")) do ranks[r] = ranks[r] + v end
    for _, o in ipairs(t:get("accepted")) do io.write("accepted ", o, "\n") end
  end
  for k, v in pairs(all) do io.write(string.format("status %d %d\n", k, v)) end
  for k, v in pairs(n) do io.write(string.format("%s %d\n", k, v)) end
  for k, v in pairs(summary.errors) do io.write(string.format("errors_%s %d\n", k, v)) end
  for r = 1, items do io.write(string.format("sent_rank %d %d\n", r, ranks[r])) end
  io.write(string.format("p50_us %d\np99_us %d\nduration_us %d\n",
    latency:percentile(50), latency:percentile(99), summary.duration))
end
