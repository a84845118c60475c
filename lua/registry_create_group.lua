-- registry_create_group: create an instance group whose candidate storages all exist.
--
-- KEYS[1] version   string counter
-- KEYS[2] groups    hash name -> InstanceGroup JSON
-- KEYS[3] storages  hash name -> StorageConfig JSON
-- ARGV[1] name      group name
-- ARGV[2] group     InstanceGroup JSON (validated by the caller)
-- ARGV[3..] candidate storage names
--
-- Reply: {1, new_version} (also when exactly this group exists: a resend) | {6, message}
--        (exists with another configuration) | {5, message} (unknown storage, named)
-- Example: storages = {nfs_01}; ARGV = {"g1", "{...}", "nfs_01"} -> groups = {g1}, {1, v+1}.
if #KEYS ~= 3 or #ARGV < 3 then return redis.error_reply('registry_create_group: expected 3 keys, >= 3 args') end
local existing = redis.call('HGET', KEYS[2], ARGV[1])
-- The same group again (a resend after a lost reply, or a repeated request): done already.
if existing == ARGV[2] then return {1, tostring(redis.call('GET', KEYS[1]) or '0')} end
if existing then
  return {6, "instance group '" .. ARGV[1] .. "' already exists (with another configuration); use updateInstanceGroup to change it"}
end
for i = 3, #ARGV do
  if redis.call('HEXISTS', KEYS[3], ARGV[i]) == 0 then
    return {5, "storage candidate '" .. ARGV[i] .. "' does not exist; add it with addStorage first"}
  end
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return {1, tostring(redis.call('INCR', KEYS[1]))}
