-- wrk script: POST an order for a random user. Item from the ITEM variable.
-- Counts responses by status so the bench can report accepted requests/s.
-- REPEAT=K: each thread cycles over K random users instead, the buyer who
-- keeps pressing buy (202 once, then 409).
local item = os.getenv("ITEM") or "1"
local repeat_k = tonumber(os.getenv("REPEAT") or "0")
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
  few, next_user = {}, 0
  for i = 1, repeat_k do few[i] = math.random(1, 2000000000) end
end

function request()
  local user
  if repeat_k > 0 then
    next_user = next_user % repeat_k + 1
    user = few[next_user]
  else
    user = math.random(1, 2000000000)
  end
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
