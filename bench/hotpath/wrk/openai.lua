-- wrk script for the hot-path benchmark: POSTs OpenAI chat requests and checks every answer.
--
-- Environment: BENCH_STREAM (0/1), BENCH_TOKENS (tokens each answer must carry),
-- BENCH_MODEL, BENCH_KEYS (comma-separated API keys; requests rotate over them, one key
-- per tenant). A response is "good" when its status is 200 and it carries exactly
-- BENCH_TOKENS token markers ("qz", see payloads.py) and, for streams, the final [DONE].
-- Counting markers in the body (wrk hands the de-chunked body to response()) gives the
-- relayed chunks whatever the proxy did to the JSON around them.

local stream = os.getenv("BENCH_STREAM") == "1"
local expected = tonumber(os.getenv("BENCH_TOKENS") or "16")
local model = os.getenv("BENCH_MODEL") or "fake"
local keys_env = os.getenv("BENCH_KEYS") or "bench-key"

local requests = {}
local next_request = 1
good, bad, tokens, non200 = 0, 0, 0, 0

local function body_for(is_stream)
  local s = '{"model":"' .. model .. '","messages":[{"role":"user","content":"hello bench"}],'
    .. '"max_tokens":' .. expected
  if is_stream then
    s = s .. ',"stream":true,"stream_options":{"include_usage":true}'
  end
  return s .. '}'
end

function init(args)
  for key in string.gmatch(keys_env, "[^,]+") do
    local headers = {
      ["Content-Type"] = "application/json",
      ["Authorization"] = "Bearer " .. key,
    }
    table.insert(requests, wrk.format("POST", wrk.path, headers, body_for(stream)))
  end
end

function request()
  local r = requests[next_request]
  next_request = next_request % #requests + 1
  return r
end

local function count_markers(body)
  local n, at = 0, 1
  while true do
    local s = string.find(body, "qz", at, true)
    if s == nil then return n end
    n = n + 1
    at = s + 2
  end
end

function response(status, headers, body)
  if status ~= 200 then
    non200 = non200 + 1
    bad = bad + 1
    return
  end
  local n = count_markers(body)
  tokens = tokens + n
  local done_ok = (not stream) or (string.find(body, "[DONE]", 1, true) ~= nil)
  if n == expected and done_ok then good = good + 1 else bad = bad + 1 end
end

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function done(summary, latency, requests_)
  local g, b, t, n2 = 0, 0, 0, 0
  for _, th in ipairs(threads) do
    g = g + th:get("good"); b = b + th:get("bad")
    t = t + th:get("tokens"); n2 = n2 + th:get("non200")
  end
  local e = summary.errors
  io.write(string.format(
    'BENCH_RESULT {"duration_us":%d,"requests":%d,"good":%d,"bad":%d,"tokens":%d,'
    .. '"non200":%d,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,'
    .. '"p50_us":%d,"p90_us":%d,"p99_us":%d,"mean_us":%.1f}\n',
    summary.duration, summary.requests, g, b, t, n2, e.connect, e.read, e.write, e.status,
    e.timeout, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.mean))
end
