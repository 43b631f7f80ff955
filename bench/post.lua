-- wrk script: POST an order for a random user. Item from the ITEM variable.
-- Counts responses by status so the bench can report accepted requests/s.
local item = os.getenv("ITEM") or "1"
local counts = {}
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  math.randomseed(os.time() + math.floor(os.clock() * 1e6) + tonumber(tostring({}):sub(8), 16) % 100000)
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  statuses = {}
end

function request()
  local user = math.random(1, 2000000000)
  return wrk.format(nil, "/api/v1/seckill", nil,
                    string.format('{"user_id":%d,"item_id":%s}', user, item))
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local total = {}
  for _, t in ipairs(threads) do
    local s = t:get("statuses")
    for k, v in pairs(s) do total[k] = (total[k] or 0) + v end
  end
  for k, v in pairs(total) do
    io.write(string.format("status %d %d\n", k, v))
  end
  io.write(string.format("p50_us %d\np99_us %d\nduration_us %d\n",
    latency:percentile(50), latency:percentile(99), summary.duration))
end
