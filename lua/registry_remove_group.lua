-- registry_remove_group: remove an instance group that has no instances.
--
-- KEYS[1] version          string counter
-- KEYS[2] groups           hash name -> InstanceGroup JSON
-- KEYS[3] group_instances  hash group -> instance count
-- ARGV[1] name             group name
--
-- Reply: {1, new_version} | {5, message} (unknown group, or still has instances: says how many)
-- Example: group_instances = {g1 = 2}; ARGV = {"g1"} -> {5, "... still has 2 instances ..."}.
if #KEYS ~= 3 or #ARGV ~= 1 then return redis.error_reply('registry_remove_group: expected 3 keys, 1 arg') end
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0 then
  return {5, "instance group '" .. ARGV[1] .. "' does not exist"}
end
local n = tonumber(redis.call('HGET', KEYS[3], ARGV[1]) or '0')
if n > 0 then
  return {5, "instance group '" .. ARGV[1] .. "' still has " .. n ..
             " instance(s); remove them with removeInstance first"}
end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return {1, tostring(redis.call('INCR', KEYS[1]))}
