-- registry_set_storage_health: records a worker's health check of a storage. Unhealthy
-- storages are skipped for new writes and weighted out for reads, like disabled ones, but the
-- state is separate: operators disable, workers observe. The version bumps only on a change,
-- so frequent checks do not make every frontend reload the registry.
--
-- KEYS[1] version             string counter
-- KEYS[2] storages            hash name -> StorageConfig JSON
-- KEYS[3] storages_unhealthy  set of names that failed their last check
-- ARGV[1] name
-- ARGV[2] "1" healthy, "0" unhealthy
--
-- Reply: {1, "1"|"0"} (changed or not) | {5, message} (unknown storage)
-- Example: unhealthy = {}; ARGV = {"nfs_01", "0"} -> unhealthy = {nfs_01}, version +1, {1, 1};
--          the same again -> {1, 0}, nothing changes.
if #KEYS ~= 3 or #ARGV ~= 2 then return redis.error_reply('registry_set_storage_health: expected 3 keys, 2 args') end
if ARGV[2] ~= '0' and ARGV[2] ~= '1' then return redis.error_reply('registry_set_storage_health: ARGV[2] must be 0 or 1') end
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0 then return {5, "storage '" .. ARGV[1] .. "' does not exist"} end
local changed
if ARGV[2] == '1' then changed = redis.call('SREM', KEYS[3], ARGV[1]) else changed = redis.call('SADD', KEYS[3], ARGV[1]) end
if changed == 1 then redis.call('INCR', KEYS[1]) end
return {1, tostring(changed)}
