"""The server-side scripts of the Redis state: each call is one atomic round trip.

Times come from Redis's own clock (``TIME``), never a replica's, so replicas with skewed
clocks agree on when a lease expires. Lease sets are sorted sets: member = one request on
one replica, score = its expiry in milliseconds. A bucket is a hash ``level``/``at`` (tokens,
ms) refilled lazily at ``tokens_per_minute / 60000`` per ms up to its size.
"""

from __future__ import annotations

NOW_MS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

REFILL = """
local function refill(key, rate, size, now)
  local b = redis.call('HMGET', key, 'level', 'at')
  local level = tonumber(b[1]) or size
  local at = tonumber(b[2]) or now
  if now > at then level = level + (now - at) * rate end
  if level > size then level = size end
  return level
end
"""

ADMIT_BODY = """
-- KEYS: lease set, bucket, epoch. ARGV: member, ttl_ms, max_concurrent (0: none),
-- tokens_per_minute (0: none), bucket size, cost, epoch (EPOCH_FENCE).
-- Returns {1, 0, 0} granted; {0, 1, 0} over max_concurrent; {0, 2, ms} over quota, ms until
-- enough tokens return.
local cap = tonumber(ARGV[3])
local tpm = tonumber(ARGV[4])
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if cap > 0 and redis.call('ZCARD', KEYS[1]) >= cap then return {0, 1, 0} end
if tpm > 0 then
  local size = tonumber(ARGV[5])
  local cost = tonumber(ARGV[6])
  local rate = tpm / 60000.0
  local level = refill(KEYS[2], rate, size, now)
  local need = math.min(cost, size)
  if level < need then return {0, 2, math.ceil((need - level) / rate)} end
  redis.call('HSET', KEYS[2], 'level', tostring(level - cost), 'at', now)
  redis.call('PEXPIRE', KEYS[2], math.ceil(size / rate) + ttl)
end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('PEXPIRE', KEYS[1], ttl * 2)
return {1, 0, 0}
"""
EPOCH_FENCE = """
-- The last key is the epoch key, the last argument the epoch the replica last saw ('' none
-- yet). A store that lost its data since (another epoch, or none) answers {0, 4, 0}: the
-- replica's leases are not in it, so it rejoins as after an outage.
if ARGV[#ARGV] ~= '' and redis.call('GET', KEYS[#KEYS]) ~= ARGV[#ARGV] then
  return {0, 4, 0}
end
"""

ADMIT = NOW_MS + REFILL + EPOCH_FENCE + ADMIT_BODY

RELEASE = (
    NOW_MS
    + REFILL
    + """
-- KEYS: lease set, bucket. ARGV: member, tokens_per_minute (0: none), bucket size, tokens
-- to give back (estimate - actual; the whole estimate if never served; negative charges).
-- Idempotent: only the call that removes the lease settles. Returns 1 if it settled.
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
local tpm = tonumber(ARGV[2])
if tpm > 0 then
  local size = tonumber(ARGV[3])
  local rate = tpm / 60000.0
  local level = refill(KEYS[2], rate, size, now) + tonumber(ARGV[4])
  if level > size then level = size end
  redis.call('HSET', KEYS[2], 'level', tostring(level), 'at', now)
end
return 1
"""
)

HEARTBEAT = (
    NOW_MS
    + """
-- KEYS: replica set, replica info hash, epoch key, then one lease set per lease held.
-- ARGV: replica id, ttl_ms, info (JSON), flags (one character per lease held: 'a' add it,
-- 'r' renew it if still there), the epoch this replica last saw, then one member per lease.
-- Registers the replica, renews its leases, adds those taken while Redis could not answer
-- and, when the epoch changed (Redis lost its data and a replica started a new one), writes
-- every one back: the leases this replica holds are the truth about its requests.
-- Returns {live replicas, 1 if this replica rebuilt its leases else 0, the epoch, now, the
-- time of the oldest live replica's last heartbeat}: a replica that rejoins knows every
-- replica has been heard since once that time passes its rejoin.
local ttl = tonumber(ARGV[2])
local flags = ARGV[4]
local epoch = redis.call('GET', KEYS[3])
if not epoch then
  epoch = tostring(now) .. '-' .. ARGV[1]
  redis.call('SET', KEYS[3], epoch)
end
local rebuilt = 0
if epoch ~= ARGV[5] then rebuilt = 1 end
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #dead > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  redis.call('HDEL', KEYS[2], unpack(dead))
end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
for i = 4, #KEYS do
  local member = ARGV[i + 2]
  if rebuilt == 1 or string.sub(flags, i - 3, i - 3) == 'a' then
    redis.call('ZADD', KEYS[i], now + ttl, member)
  else
    redis.call('ZADD', KEYS[i], 'XX', now + ttl, member)
  end
  redis.call('PEXPIRE', KEYS[i], ttl * 2)
end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {redis.call('ZCARD', KEYS[1]), rebuilt, epoch, now, tonumber(oldest[2]) - ttl}
"""
)

PEERS = (
    NOW_MS
    + """
-- KEYS: in-flight hash, replica set. ARGV: replica id, ttl_ms, then backend, count pairs.
-- Writes this replica's requests in flight per backend; returns, per backend, the sum over
-- the other live replicas: {backend, n, backend, n, ...}. A dead replica's counts are
-- dropped once its heartbeat has expired.
for i = 3, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[1] .. '|' .. ARGV[i], ARGV[i + 1])
end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 2)
local all = redis.call('HGETALL', KEYS[1])
local sums, alive = {}, {}
for j = 1, #all, 2 do
  local field = all[j]
  local sep = string.find(field, '|', 1, true)
  local replica, backend = string.sub(field, 1, sep - 1), string.sub(field, sep + 1)
  if replica ~= ARGV[1] then
    if alive[replica] == nil then
      local score = redis.call('ZSCORE', KEYS[2], replica)
      alive[replica] = score ~= false and tonumber(score) > now
    end
    if alive[replica] then
      sums[backend] = (sums[backend] or 0) + tonumber(all[j + 1])
    else
      redis.call('HDEL', KEYS[1], field)
    end
  end
end
local out = {}
for backend, n in pairs(sums) do
  out[#out + 1] = backend
  out[#out + 1] = n
end
return out
"""
)

LEAVE = """
-- KEYS: replica set, replica info hash. ARGV: replica id. A replica that stops says so.
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
"""

FAIR_SYNC = (
    NOW_MS
    + """
-- KEYS: counters hash (tenant -> virtual time), backlog sorted set (member 'replica|tenant',
-- score = expiry ms), 'last' key. ARGV: replica id, backlog ttl ms, counters ttl ms, n, then
-- n (tenant, virtual time served since the last sync) pairs, then the tenants queued here.
-- The rule of policies/fairness/fleet_ledger.py: add what was served, lift a tenant that
-- becomes queued in the fleet to the least-served queued tenant, replace this replica's
-- backlog entries. Returns {k, k (tenant, counter) pairs of the tenants queued on other
-- replicas, then (tenant, counter) pairs of the tenants this replica named}.
local me, ttl, keep, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local function fmt(x) return string.format('%.17g', x) end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local last = tonumber(redis.call('GET', KEYS[3])) or 0
local function counter(t) return tonumber(redis.call('HGET', KEYS[1], t)) or last end
local mine = {}
for i = 5, 4 + 2 * n, 2 do
  local t, served = ARGV[i], tonumber(ARGV[i + 1])
  local before = counter(t)
  redis.call('HSET', KEYS[1], t, fmt(before + served))
  if served > 0 and before > last then last = before end
  mine[#mine + 1] = t
end
redis.call('SET', KEYS[3], fmt(last), 'PX', keep)
local entries = redis.call('ZRANGE', KEYS[2], 0, -1)
local queued, floor = {}, nil
local owners, tenants = {}, {}
for j, m in ipairs(entries) do
  local sep = string.find(m, '|', 1, true)
  owners[j], tenants[j] = string.sub(m, 1, sep - 1), string.sub(m, sep + 1)
  if not queued[tenants[j]] then
    queued[tenants[j]] = true
    local c = counter(tenants[j])
    if floor == nil or c < floor then floor = c end
  end
end
if floor == nil then floor = last end
for i = 5 + 2 * n, #ARGV do
  local t = ARGV[i]
  if not queued[t] then
    local c = tonumber(redis.call('HGET', KEYS[1], t))
    if c == nil or c < floor then redis.call('HSET', KEYS[1], t, fmt(floor)) end
  end
  mine[#mine + 1] = t
end
for j, m in ipairs(entries) do
  if owners[j] == me then redis.call('ZREM', KEYS[2], m) end
end
for i = 5 + 2 * n, #ARGV do redis.call('ZADD', KEYS[2], now + ttl, me .. '|' .. ARGV[i]) end
redis.call('PEXPIRE', KEYS[2], ttl * 2)
redis.call('PEXPIRE', KEYS[1], keep)
local function value(t) return redis.call('HGET', KEYS[1], t) or fmt(last) end
local out, seen = {0}, {}
for j = 1, #entries do
  local t = tenants[j]
  if owners[j] ~= me and not seen[t] then
    seen[t] = true
    out[1] = out[1] + 1
    out[#out + 1] = t
    out[#out + 1] = value(t)
  end
end
for _, t in ipairs(mine) do
  if not seen[t] then
    seen[t] = true
    out[#out + 1] = t
    out[#out + 1] = value(t)
  end
end
return out
"""
)
