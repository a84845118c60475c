-- registry_add_storage: add a storage unless one with the same name exists, and give it a
-- numeric id (what compact block records store). Ids are never reused, so blocks written on
-- a removed storage can never be mistaken for blocks of a new one with the same name.
--
-- KEYS[1] version         string counter
-- KEYS[2] storages        hash name -> StorageConfig JSON
-- KEYS[3] storage_ids     hash name -> id
-- KEYS[4] storage_id_seq  string counter
-- ARGV[1] name      storage global_unique_name (validated by the caller)
-- ARGV[2] config    StorageConfig JSON
--
-- Reply: {1, new_version} | {6, message} (exists) | {7, message} (65535 ids used up)
-- Example: storages = {} ; ARGV = {"nfs_01", "{...}"} -> storages = {nfs_01 = "{...}"},
--          storage_ids = {nfs_01 = 1}, {1, "1"}. Again with the same name -> {6, "... already exists ..."}.
if #KEYS ~= 4 or #ARGV ~= 2 then return redis.error_reply('registry_add_storage: expected 4 keys, 2 args') end
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then
  return {6, "storage '" .. ARGV[1] .. "' already exists; use updateStorage to change it"}
end
if tonumber(redis.call('GET', KEYS[4]) or '0') >= 65535 then
  return {7, "65535 storages have been created in this namespace; no storage id is left"}
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[1], redis.call('INCR', KEYS[4]))
return {1, tostring(redis.call('INCR', KEYS[1]))}
