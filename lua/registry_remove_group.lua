-- registry_remove_group: remove an instance group that has no instances.
--
-- KEYS[1] version          string counter
-- KEYS[2] groups           hash name -> InstanceGroup JSON
-- KEYS[3] group_instances  hash group -> instance count
-- KEYS[4] removed          string `<call id>\n<reply>`, for 60 s after a removal went through
-- ARGV[1] name             group name
-- ARGV[2] call id          fresh per request (a resend carries the same)
--
-- Reply: {1, new_version} | {5, message} (unknown group, or still has instances: says how many).
-- A resend of a removal that went through (its reply lost with the connection: the same call id)
-- answers the first run's reply from KEYS[4]; another call gets the error.
-- Example: group_instances = {g1 = 2}; ARGV = {"g1"} -> {5, "... still has 2 instances ..."}.
if #KEYS ~= 4 or #ARGV ~= 2 then return redis.error_reply('registry_remove_group: expected 4 keys, 2 args') end
-- A resend of this very call (same call id) answers the first run's reply before anything else
-- is looked at: the name may exist again by now (created anew), and must not be removed twice.
local first = redis.call('GET', KEYS[4])
if first and first:sub(1, #ARGV[2] + 1) == ARGV[2] .. '\n' then return {1, first:sub(#ARGV[2] + 2)} end
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
local version = tostring(redis.call('INCR', KEYS[1]))
redis.call('SET', KEYS[4], ARGV[2] .. '\n' .. version, 'PX', 60000)
return {1, version}
