-- reap_reporters: forgets engine reporters unregistered for longer than the cleanup grace, so
-- that hosts that came and went (pod churn) do not pile up in the instance's `reporters` hash,
-- which every getHostCacheState reads. Run by the worker after a complete pass of
-- lua/prune_engine.lua over the instance: a forgotten reporter's records are invisible already
-- (no reporter) and any left are dropped by the next pass; its index is never handed out again
-- (32-bit, only counted up), so nothing can come back under it. A host that reports again
-- afterwards is a new reporter.
--
-- KEYS[1] reporters  (see lua/report_event.lua)
-- ARGV[1] cleanup grace, ms
--
-- Reply: {1, reporters forgotten}
-- Example: reporter 'L1P5|h:1' went down (state T, heartbeat field = when) more than a grace
--   ago -> its record and '#<idx>' go; reply {1, 1}. One silent (state A) for more than two
--   graces (unregistered after one, forgotten after the next) goes too.
if #KEYS ~= 1 or #ARGV ~= 1 then return redis.error_reply('reap_reporters: expected 1 key, 1 arg') end
local REP, grace = KEYS[1], tonumber(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local all = redis.call('HGETALL', REP)
local gone = {}
for i = 1, #all, 2 do
  local id, rec = all[i], all[i + 1]
  local first = id:sub(1, 1)
  if first ~= '#' and first ~= '%' and #rec >= 30 then
    local state, idx, _, hb = struct.unpack('<c1I4I4d', rec)
    if (state == 'T' and now - hb > grace) or now - hb > 2 * grace then
      gone[#gone + 1] = id
      gone[#gone + 1] = '#' .. idx
    end
  end
end
for c = 1, #gone, 1000 do redis.call('HDEL', REP, unpack(gone, c, math.min(c + 999, #gone))) end
return {1, #gone / 2}
