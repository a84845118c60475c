-- registry_update_storage: replace a storage's config if it still equals what the caller read
-- (compare-and-set, so two concurrent updates cannot silently overwrite each other).
--
-- KEYS[1] version   string counter
-- KEYS[2] storages  hash name -> StorageConfig JSON
-- ARGV[1] name      storage name
-- ARGV[2] expected  the JSON the caller read and based its decision on
-- ARGV[3] config    the new StorageConfig JSON
--
-- Reply: {1, new_version} | {5, message} (unknown storage) | {5, message} (changed meanwhile)
-- Example: storages = {nfs_01 = A}; ARGV = {"nfs_01", A, B} -> storages = {nfs_01 = B}, {1, v+1}.
if #KEYS ~= 2 or #ARGV ~= 3 then return redis.error_reply('registry_update_storage: expected 2 keys, 3 args') end
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if not cur then return {5, "storage '" .. ARGV[1] .. "' does not exist; add it with addStorage"} end
if cur ~= ARGV[2] then return {5, "storage '" .. ARGV[1] .. "' was changed concurrently; retry"} end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
return {1, tostring(redis.call('INCR', KEYS[1]))}
