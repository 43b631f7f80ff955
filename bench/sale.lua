-- wrk script for a flash sale: REQUESTS requests in all (split over the
-- threads), from USERS distinct users picked at random (so with repeats), at
-- ITEM, each with its user's bearer token (producer.auth = "jwt"): TOKENS is
-- a file of one token a line, line N for user N (seckillctl token issue
-- --users 1-USERS). Prints the responses by status and the latency
-- percentiles. THREADS: wrk's -t, for each thread's share and the start line.
local item = os.getenv("ITEM") or "1"
local users = tonumber(os.getenv("USERS") or "50000")
local total = tonumber(os.getenv("REQUESTS") or "100000")
local path = os.getenv("TOKENS") or error("TOKENS: a file of tokens, line N for user N")
local nthreads_env = tonumber(os.getenv("THREADS") or "1")
local threads = {}
local nthreads = 0

-- The start line. wrk makes its threads one after another and starts each as
-- soon as it is made, and each reads the whole token file first (76 ms of CPU
-- for 100,000 tokens): without a wait the first thread is already selling while
-- the next one reads, on the same two cores, inside the sale's first 100 ms.
-- Each thread marks itself ready once its tokens are in (a file beside TOKENS),
-- and its first request waits until every thread has.
local function ready_path(n) return string.format("%s.ready.%d", path, n) end

local function remove_marks()
  for n = 1, nthreads_env do os.remove(ready_path(n)) end
end

local function wait_for_every_thread()
  local deadline = os.time() + 30
  for n = 1, nthreads_env do
    while true do
      local f = io.open(ready_path(n), "r")
      if f then f:close(); break end
      assert(os.time() < deadline, "thread " .. n .. " read no tokens in 30 s")
      -- Not os.execute: its system() ignores SIGINT while it runs, and
      -- restores what it found, undoing the handler wrk installs meanwhile.
      io.popen("sleep 0.005"):close()
    end
  end
end

function setup(thread)
  nthreads = nthreads + 1
  -- Called before each thread is made: an earlier run's marks go first.
  if nthreads == 1 then remove_marks() end
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
  quota = math.floor(total / nthreads_env)
  assert(io.open(ready_path(id), "w")):close()
  started = false
  -- wrk calls the first thread's request() once in its main thread, to check
  -- the request it builds, before it makes the next thread: that call must
  -- not wait.
  unchecked = (id == 1)
end

function request()
  if unchecked then
    unchecked = false
  elseif not started then
    wait_for_every_thread()
    started = true
  end
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
  remove_marks()
  local all = {}
  for _, t in ipairs(threads) do
    for k, v in pairs(t:get("statuses")) do all[k] = (all[k] or 0) + v end
  end
  for k, v in pairs(all) do io.write(string.format("status %d %d\n", k, v)) end
  io.write(string.format("p50_us %d\np99_us %d\nduration_us %d\n",
    latency:percentile(50), latency:percentile(99), summary.duration))
end
