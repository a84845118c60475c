-- registry_add_storage: add a storage unless one with the same name exists.
--
-- KEYS[1] version   string counter
-- KEYS[2] storages  hash name -> StorageConfig JSON
-- ARGV[1] name      storage global_unique_name (validated by the caller)
-- ARGV[2] config    StorageConfig JSON
--
-- Reply: {1, new_version} | {6, message}
-- Example: storages = {} ; ARGV = {"nfs_01", "{...}"} -> storages = {nfs_01 = "{...}"}, {1, "1"}.
--          Again with the same name -> {6, "storage 'nfs_01' already exists"}, nothing changes.
if #KEYS ~= 2 or #ARGV ~= 2 then return redis.error_reply('registry_add_storage: expected 2 keys, 2 args') end
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 0 then
  return {6, "storage '" .. ARGV[1] .. "' already exists; use updateStorage to change it"}
end
return {1, tostring(redis.call('INCR', KEYS[1]))}
