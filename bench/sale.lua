-- wrk script for a flash sale: REQUESTS requests in all (split over the
-- threads), from USERS distinct users picked at random (so with repeats), at
-- ITEM. Prints the responses by status and the latency percentiles.
local item = os.getenv("ITEM") or "1"
local users = tonumber(os.getenv("USERS") or "50000")
local total = tonumber(os.getenv("REQUESTS") or "100000")
local threads = {}
local nthreads = 0

function setup(thread)
  nthreads = nthreads + 1
  thread:set("id", nthreads)
  table.insert(threads, thread)
end

function init(args)
  math.randomseed(os.time() * 1000 + id)
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  statuses = {}
  sent, got = 0, 0
  quota = math.floor(total / tonumber(os.getenv("THREADS") or "1"))
end

function request()
  sent = sent + 1
  return wrk.format(nil, "/api/v1/seckill", nil,
                    string.format('{"user_id":%d,"item_id":%s}', math.random(1, users), item))
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
