-- wrk script: POST an order with a bearer token, the buyer being the token's
-- sub (producer.auth = "jwt"). Item from ITEM; tokens from TOKENS, a file of
-- one token a line (seckillctl token issue --users A-B). A user buys once,
-- so each of the THREADS threads keeps its own stride of the file (lines
-- id, id + THREADS, ...) and sends each token once; if it runs out it starts
-- over and counts it (wrapped), as every answer after that is a 409.
-- REPEAT=K: each thread cycles over its first K tokens instead, the buyer
-- who keeps pressing buy (202 once, then 409; tokens served from the cache).
local item = os.getenv("ITEM") or "1"
local path = os.getenv("TOKENS") or error("TOKENS: a file of tokens, one a line")
local nthreads = tonumber(os.getenv("THREADS") or "1")
local repeat_k = tonumber(os.getenv("REPEAT") or "0")
local threads = {}
local n = 0

function setup(thread)
  n = n + 1
  thread:set("id", n)
  table.insert(threads, thread)
end

function init(args)
  -- Read before wrk starts its clock: init runs before the threads do.
  tokens = {}
  local f = assert(io.open(path, "r"))
  local line = 0
  for t in f:lines() do
    if line % nthreads == id - 1 then
      tokens[#tokens + 1] = "Bearer " .. t
      if repeat_k > 0 and #tokens >= repeat_k then break end
    end
    line = line + 1
  end
  f:close()
  assert(#tokens > 0, "no tokens for thread " .. id .. " in " .. path)
  -- wrk.format does not merge wrk.headers into the table it is given.
  headers = { ["Content-Type"] = "application/json", ["Host"] = wrk.headers["Host"] }
  body = string.format('{"item_id":%s}', item)
  statuses, next_tok, wrapped = {}, 0, 0
end

function request()
  next_tok = next_tok + 1
  if next_tok > #tokens then
    next_tok = 1
    if repeat_k == 0 then wrapped = wrapped + 1 end
  end
  headers["Authorization"] = tokens[next_tok]
  return wrk.format("POST", "/api/v1/seckill", headers, body)
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local total, w = {}, 0
  for _, t in ipairs(threads) do
    for k, v in pairs(t:get("statuses")) do total[k] = (total[k] or 0) + v end
    w = w + t:get("wrapped")
  end
  for k, v in pairs(total) do
    io.write(string.format("status %d %d\n", k, v))
  end
  io.write(string.format("wrapped %d\np50_us %d\np99_us %d\nduration_us %d\n",
    w, latency:percentile(50), latency:percentile(99), summary.duration))
end
