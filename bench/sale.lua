-- wrk script for a flash sale: REQUESTS requests in all (split over the
-- threads), from USERS distinct users picked at random (so with repeats), at
-- ITEM, each with its user's bearer token (producer.auth = "jwt"): TOKENS is
-- a file of one token a line, line N for user N (seckillctl token issue
-- --users 1-USERS). Prints the responses by status and the latency
-- percentiles.
local item = os.getenv("ITEM") or "1"
local users = tonumber(os.getenv("USERS") or "50000")
local total = tonumber(os.getenv("REQUESTS") or "100000")
local path = os.getenv("TOKENS") or error("TOKENS: a file of tokens, line N for user N")
local threads = {}
local nthreads = 0

function setup(thread)
  nthreads = nthreads + 1
  thread:set("id", nthreads)
  table.insert(threads, thread)
end

function init(args)
  math.randomseed(os.time() * 1000 + id)
  -- Every thread may pick any user: each keeps the whole file.
  tokens = {}
  local f = assert(io.open(path, "r"))
  for t in f:lines() do tokens[#tokens + 1] = "Bearer " .. t end
  f:close()
  assert(#tokens >= users, string.format("%s has %d tokens, USERS is %d", path, #tokens, users))
  -- wrk.format does not merge wrk.headers into the table it is given.
  headers = { ["Content-Type"] = "application/json", ["Host"] = wrk.headers["Host"] }
  body = string.format('{"item_id":%s}', item)
  statuses = {}
  sent, got = 0, 0
  quota = math.floor(total / tonumber(os.getenv("THREADS") or "1"))
end

function request()
  sent = sent + 1
  headers["Authorization"] = tokens[math.random(1, users)]
  return wrk.format("POST", "/api/v1/seckill", headers, body)
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
  got = got + 1
  if got >= quota then wrk.thread:stop() end
end

function done(summary, latency, requests)
  local all = {}
  for _, t in ipairs(threads) do
    for k, v in pairs(t:get("statuses")) do all[k] = (all[k] or 0) + v end
  end
  for k, v in pairs(all) do io.write(string.format("status %d %d\n", k, v)) end
  io.write(string.format("p50_us %d\np99_us %d\nduration_us %d\n",
    latency:percentile(50), latency:percentile(99), summary.duration))
end
