-- registry_set_storage_available: enable or disable a storage. Disabled storages are skipped
-- for new writes and weighted out for reads; their blocks stay.
--
-- KEYS[1] version            string counter
-- KEYS[2] storages           hash name -> StorageConfig JSON
-- KEYS[3] storages_disabled  set of disabled names
-- ARGV[1] name               storage name
-- ARGV[2] available          "1" to enable, "0" to disable
--
-- Reply: {1, new_version} | {5, message} (unknown storage)
-- Example: disabled = {}; ARGV = {"nfs_01", "0"} -> disabled = {nfs_01}, {1, v+1}.
--          Enabling an enabled storage is OK (idempotent) and still bumps the version.
if #KEYS ~= 3 or #ARGV ~= 2 then return redis.error_reply('registry_set_storage_available: expected 3 keys, 2 args') end
if ARGV[2] ~= '0' and ARGV[2] ~= '1' then return redis.error_reply('registry_set_storage_available: ARGV[2] must be 0 or 1') end
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0 then
  return {5, "storage '" .. ARGV[1] .. "' does not exist"}
end
if ARGV[2] == '1' then redis.call('SREM', KEYS[3], ARGV[1]) else redis.call('SADD', KEYS[3], ARGV[1]) end
return {1, tostring(redis.call('INCR', KEYS[1]))}
