"""The admission script for a retry: the fleet's retry budget, then the tenant's quota.

Retries are counted exactly, on Redis's clock: a sorted set per budget key (member = one
admitted retry, score = when, in ms), pruned to the window. First attempts come from a hash
per key (field = replica, value = ``count:published_ms``) that each replica refreshes every
``peer_sync_interval_ms``; the calling replica passes its current count instead of its own
field, and a field not refreshed within ``fresh_ms`` (a replica that stopped) is dropped.
"""

from __future__ import annotations

from gateway.replicas.scripts import ADMIT_BODY, EPOCH_FENCE, NOW_MS, REFILL

ADMIT_RETRY = (
    NOW_MS
    + REFILL
    + "local function admit_quota()\n"
    + ADMIT_BODY
    + "\nend\n"
    + EPOCH_FENCE
    + """
-- KEYS: lease set, bucket (as ADMIT), retries of the key, first attempts of the key, epoch.
-- ARGV 1-6: as ADMIT; 7: window ms; 8: ratio; 9: floor (retries allowed with no first
-- attempt); 10: '1' to take the quota lease too; 11: replica id; 12: its first attempts in
-- the window now; 13: fresh_ms; 14: epoch (EPOCH_FENCE).
-- Returns as ADMIT, or {0, 3, ms} over the retry budget, ms until its oldest retry leaves.
local window = tonumber(ARGV[7])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - window)
local retries = redis.call('ZCARD', KEYS[3])
local firsts = tonumber(ARGV[12])
local published = redis.call('HGETALL', KEYS[4])
for j = 1, #published, 2 do
  if published[j] ~= ARGV[11] then
    local count, at = string.match(published[j + 1], '^(%d+):(%d+)$')
    if count and now - tonumber(at) <= tonumber(ARGV[13]) then
      firsts = firsts + tonumber(count)
    else
      redis.call('HDEL', KEYS[4], published[j])
    end
  end
end
if retries + 1 > tonumber(ARGV[8]) * firsts + tonumber(ARGV[9]) then
  local oldest = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  local since = now
  if #oldest > 0 then since = tonumber(oldest[2]) end
  return {0, 3, since + window - now}
end
if ARGV[10] == '1' then
  local answer = admit_quota()
  if answer[1] == 0 then return answer end
end
redis.call('ZADD', KEYS[3], now, ARGV[1])
redis.call('PEXPIRE', KEYS[3], window * 2)
return {1, 0, 0}
"""
)

PUBLISH_FIRSTS = (
    NOW_MS
    + """
-- KEYS: the first-attempt hash of each key. ARGV: replica id, window ms, then one count per
-- key. Publishes this replica's first attempts in the window, stamped with Redis's clock.
for i = 1, #KEYS do
  redis.call('HSET', KEYS[i], ARGV[1], ARGV[i + 2] .. ':' .. now)
  redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[2]) * 2)
end
return #KEYS
"""
)
