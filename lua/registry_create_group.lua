-- registry_create_group: create an instance group. Its candidate storages need not exist yet
-- (as in Tair: provisioning tools create resources in any order); a candidate that does not
-- exist is skipped when choosing where to write and used as soon as it is added.
--
-- KEYS[1] version   string counter
-- KEYS[2] groups    hash name -> InstanceGroup JSON
-- ARGV[1] name      group name
-- ARGV[2] group     InstanceGroup JSON (validated by the caller)
--
-- Reply: {1, new_version} (also when exactly this group exists: a resend) | {6, message}
--        (exists with another configuration)
-- Example: storages = {nfs_01}; ARGV = {"g1", "{... nfs_01, nfs_02 ...}"} -> groups = {g1},
--          {1, v+1}; nfs_02 is used once added.
if #KEYS ~= 2 or #ARGV ~= 2 then return redis.error_reply('registry_create_group: expected 2 keys, 2 args') end
local existing = redis.call('HGET', KEYS[2], ARGV[1])
-- The same group again (a resend after a lost reply, or a repeated request): done already.
if existing == ARGV[2] then return {1, tostring(redis.call('GET', KEYS[1]) or '0')} end
if existing then
  return {6, "instance group '" .. ARGV[1] .. "' already exists (with another configuration); use updateInstanceGroup to change it"}
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return {1, tostring(redis.call('INCR', KEYS[1]))}
