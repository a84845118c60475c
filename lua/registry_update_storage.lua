-- registry_update_storage: replace a storage's config if it still equals what the caller read
-- (compare-and-set, so two concurrent updates cannot silently overwrite each other), and only
-- if every other storage is still what the caller checked the new config against (file-like
-- roots must not nest, validate::roots_disjoint), so a concurrent add or update cannot slip a
-- nested root past the check.
--
-- KEYS[1] version   string counter
-- KEYS[2] storages  hash name -> StorageConfig JSON
-- ARGV[1] name      storage name
-- ARGV[2] expected  the JSON the caller read and based its decision on
-- ARGV[3] config    the new StorageConfig JSON
-- ARGV[4..] others  name, JSON, name, JSON…: every other storage the caller read (possibly none)
--
-- Reply: {1, new_version} | {5, message} (unknown storage) | {-1, message} (changed meanwhile: the caller
--        re-reads and retries)
-- Example: storages = {nfs_01 = A}; ARGV = {"nfs_01", A, B} -> storages = {nfs_01 = B}, {1, v+1}.
--          storages = {nfs_01 = A, x = X}; ARGV = {"nfs_01", A, B} -> {-1, "... changed ..."}.
if #KEYS ~= 2 or #ARGV < 3 or #ARGV % 2 ~= 1 then
  return redis.error_reply('registry_update_storage: expected 2 keys, 3 args + name/config pairs')
end
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if not cur then return {5, "storage '" .. ARGV[1] .. "' does not exist; add it with addStorage"} end
if cur ~= ARGV[2] then return {-1, "storage '" .. ARGV[1] .. "' was changed concurrently; retry"} end
local changed = {-1, "the storages changed while storage '" .. ARGV[1] .. "' was being checked against them; retry"}
if redis.call('HLEN', KEYS[2]) ~= 1 + (#ARGV - 3) / 2 then return changed end
for i = 4, #ARGV, 2 do
  if redis.call('HGET', KEYS[2], ARGV[i]) ~= ARGV[i + 1] then return changed end
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
return {1, tostring(redis.call('INCR', KEYS[1]))}
