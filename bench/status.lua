-- wrk script: buyers polling their orders, GET /api/v1/orders/ORDER with the
-- owner's bearer token. STATUS: a file of "ORDER TOKEN" lines (orders that
-- exist); each of the THREADS threads keeps its own stride of it (lines id,
-- id + THREADS, ...) and cycles over it, as a buyer polls again and again.
local path = os.getenv("STATUS") or error("STATUS: a file of 'ORDER TOKEN' lines")
local nthreads = tonumber(os.getenv("THREADS") or "1")
local threads = {}
local n = 0

function setup(thread)
  n = n + 1
  thread:set("id", n)
  table.insert(threads, thread)
end

function init(args)
  paths, tokens = {}, {}
  local f = assert(io.open(path, "r"))
  local line = 0
  for l in f:lines() do
    if line % nthreads == id - 1 then
      local order, tok = l:match("^(%d+) (%S+)$")
      paths[#paths + 1] = "/api/v1/orders/" .. order
      tokens[#tokens + 1] = "Bearer " .. tok
    end
    line = line + 1
  end
  f:close()
  assert(#paths > 0, "no orders for thread " .. id .. " in " .. path)
  headers = { ["Host"] = wrk.headers["Host"] }
  statuses, next_q = {}, 0
end

function request()
  next_q = next_q % #paths + 1
  headers["Authorization"] = tokens[next_q]
  return wrk.format("GET", paths[next_q], headers)
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local total = {}
  for _, t in ipairs(threads) do
    for k, v in pairs(t:get("statuses")) do total[k] = (total[k] or 0) + v end
  end
  for k, v in pairs(total) do
    io.write(string.format("status %d %d\n", k, v))
  end
  io.write(string.format("p50_us %d\np99_us %d\nduration_us %d\n",
    latency:percentile(50), latency:percentile(99), summary.duration))
end
