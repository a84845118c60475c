-- registry_set_storage_health: records one worker's health check of a storage and derives the
-- storage's health from every worker's recent verdict: it is unhealthy only when no worker that
-- reported within the freshness window found it healthy. So one worker on a host without the
-- mount cannot stop every write cluster-wide, and workers that disagree do not flip it on every
-- probe. Unhealthy storages are skipped for new writes and weighted out for reads, like
-- disabled ones, but the state is separate: operators disable, workers observe. The version
-- bumps only on a change, so frequent checks do not make every frontend reload the registry.
--
-- KEYS[1] version             string counter
-- KEYS[2] storages            hash name -> StorageConfig JSON
-- KEYS[3] storages_unhealthy  set of names no fresh verdict finds healthy
-- KEYS[4] storage_health      hash "<name>\n<worker>" -> "<1|0>:<unix ms>"
-- ARGV[1] name
-- ARGV[2] "1" healthy, "0" unhealthy
-- ARGV[3] worker id
-- ARGV[4] now, unix ms (the worker's clock)
-- ARGV[5] freshness window, ms: older verdicts (a stopped worker's) no longer count
--
-- Reply: {1, "1"|"0"} (the storage's health changed or not) | {-2, message} (unknown storage:
--        removed since the worker read the registry; the worker skips it — never a wire status)
-- Example: workers a and b; a reports nfs_01 "0" -> no fresh healthy verdict: unhealthy =
--          {nfs_01}, version +1, {1, "1"}; b reports "1" -> unhealthy = {}, version +1, {1, "1"};
--          a reports "0" again while b's verdict is fresh -> still healthy, {1, "0"}.
if #KEYS ~= 4 or #ARGV ~= 5 then return redis.error_reply('registry_set_storage_health: expected 4 keys, 5 args') end
if ARGV[2] ~= '0' and ARGV[2] ~= '1' then return redis.error_reply('registry_set_storage_health: ARGV[2] must be 0 or 1') end
local now, fresh = tonumber(ARGV[4]), tonumber(ARGV[5])
if not now or not fresh or fresh <= 0 then return redis.error_reply('registry_set_storage_health: bad time arguments') end
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0 then return {-2, "storage '" .. ARGV[1] .. "' does not exist"} end
redis.call('HSET', KEYS[4], ARGV[1] .. '\n' .. ARGV[3], ARGV[2] .. ':' .. ARGV[4])
-- Derive the verdict; drop what no longer counts (stale verdicts, removed storages).
local all = redis.call('HGETALL', KEYS[4])
local healthy, stale = false, {}
for i = 1, #all, 2 do
  local field, value = all[i], all[i + 1]
  local storage = field:match('^(.*)\n') or ''
  local ok, at = value:match('^([01]):(%d+)$')
  at = tonumber(at or '0')
  if now - at > fresh or redis.call('HEXISTS', KEYS[2], storage) == 0 then
    stale[#stale + 1] = field
  elseif storage == ARGV[1] and ok == '1' then
    healthy = true
  end
end
for c = 1, #stale, 1000 do redis.call('HDEL', KEYS[4], unpack(stale, c, math.min(c + 999, #stale))) end
local changed
if healthy then changed = redis.call('SREM', KEYS[3], ARGV[1]) else changed = redis.call('SADD', KEYS[3], ARGV[1]) end
if changed == 1 then redis.call('INCR', KEYS[1]) end
return {1, tostring(changed)}
