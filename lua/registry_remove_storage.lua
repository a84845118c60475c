-- registry_remove_storage: remove a storage no instance group uses.
--
-- KEYS[1] version            string counter
-- KEYS[2] storages           hash name -> StorageConfig JSON
-- KEYS[3] storages_disabled  set of disabled names
-- KEYS[4] groups             hash name -> InstanceGroup JSON
-- KEYS[5] storage_ids        hash name -> id
-- KEYS[6] storages_unhealthy set of unhealthy names
-- ARGV[1] name               storage name
--
-- Reply: {1, new_version} | {5, message} (unknown storage, or still used: names the group)
-- Example: groups = {g1 = {storage_candidates = ["nfs_01"]}}; ARGV = {"nfs_01"}
--          -> {5, "storage 'nfs_01' is used by instance group 'g1' ..."}, nothing changes.
if #KEYS ~= 6 or #ARGV ~= 1 then return redis.error_reply('registry_remove_storage: expected 6 keys, 1 arg') end
local name = ARGV[1]
if redis.call('HEXISTS', KEYS[2], name) == 0 then
  return {5, "storage '" .. name .. "' does not exist"}
end
local groups = redis.call('HGETALL', KEYS[4])
for i = 1, #groups, 2 do
  local ok, g = pcall(cjson.decode, groups[i + 1])
  if ok and type(g) == 'table' then
    local cands = g['storage_candidates']
    if type(cands) == 'table' then
      for _, c in ipairs(cands) do
        if c == name then
          return {5, "storage '" .. name .. "' is used by instance group '" .. groups[i] ..
                     "'; remove it from the group's storage_candidates first"}
        end
      end
    end
  end
end
redis.call('HDEL', KEYS[2], name)
redis.call('SREM', KEYS[3], name)
redis.call('HDEL', KEYS[5], name)
redis.call('SREM', KEYS[6], name)
return {1, tostring(redis.call('INCR', KEYS[1]))}
