"""Server-side scripts of the scrape election (``scrape_share.py``).

A backend's lead is a key holding the leading replica's id, taken with ``SET NX PX`` and
renewed by its holder; when the holder stops renewing it lapses and the next replica to ask
takes it. The leader's scrapes go to a hash per backend: ``at`` (ms on Redis's clock, when
the scrape was made) and ``sample`` (JSON).
"""

from __future__ import annotations

from gateway.replicas.scripts import NOW_MS

EXCHANGE = (
    NOW_MS
    + """
-- KEYS: lead, signals, lead, signals, ... (one pair per backend). ARGV: replica id, lead ms.
-- Per backend returns four values: 1 if this replica leads it (else 0), the age in ms of
-- the newest published scrape (-1: none), its time (its identity) and the scrape itself
-- ('' when leading or none).
local out = {}
for i = 1, #KEYS, 2 do
  redis.call('SET', KEYS[i], ARGV[1], 'NX', 'PX', ARGV[2])
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
    out[#out + 1] = 1
    out[#out + 1] = -1
    out[#out + 1] = 0
    out[#out + 1] = ''
  else
    local s = redis.call('HMGET', KEYS[i + 1], 'at', 'sample')
    out[#out + 1] = 0
    if s[1] and s[2] then
      out[#out + 1] = now - tonumber(s[1])
      out[#out + 1] = tonumber(s[1])
      out[#out + 1] = s[2]
    else
      out[#out + 1] = -1
      out[#out + 1] = 0
      out[#out + 1] = ''
    end
  end
end
return out
"""
)

PUBLISH = (
    NOW_MS
    + """
-- KEYS: lead, signals. ARGV: replica id, the scrape's age in ms, the scrape, keep ms.
-- Written only while this replica still leads the backend. Returns 1 if written.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[2], 'at', now - tonumber(ARGV[2]), 'sample', ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return 1
"""
)
