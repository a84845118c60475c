-- registry_remove_instance: remove an instance from the registry. The caller trims the
-- instance's cache (queueing physical deletion) before calling this, so a crash in between
-- leaves a registered instance with an empty cache, never orphaned blocks.
--
-- KEYS[1] version          string counter
-- KEYS[2] group_instances  hash group -> instance count
-- KEYS[3] instances        hash id -> InstanceInfo JSON
-- KEYS[4] instance_fp      hash id -> fingerprint
-- KEYS[5] removed          string `<call id>\n<reply>`, for 60 s after a removal went through
-- ARGV[1] instance_id
-- ARGV[2] expected group name, or "" for any
-- ARGV[3] call id          fresh per request (a resend carries the same)
--
-- Reply: {1, group} | {8, message} (not registered) | {5, message} (in another group).
-- A resend of a removal that went through (its reply lost with the connection: the same call id)
-- answers the first run's reply from KEYS[5]; another call gets the error.
-- Example: instances = {i1 in g1}; ARGV = {"i1", ""} -> instances = {}, group_instances g1 -1, {1, "g1"}.
if #KEYS ~= 5 or #ARGV ~= 3 then return redis.error_reply('registry_remove_instance: expected 5 keys, 3 args') end
-- A resend of this very call (same call id) answers the first run's reply before anything else
-- is looked at: the name may exist again by now (created anew), and must not be removed twice.
local first = redis.call('GET', KEYS[5])
if first and first:sub(1, #ARGV[3] + 1) == ARGV[3] .. '\n' then return {1, first:sub(#ARGV[3] + 2)} end
local info = redis.call('HGET', KEYS[3], ARGV[1])
if not info then
  return {8, "instance '" .. ARGV[1] .. "' is not registered"}
end
local ok, obj = pcall(cjson.decode, info)
local group = ok and type(obj) == 'table' and obj['instance_group_name'] or ''
if ARGV[2] ~= '' and ARGV[2] ~= group then
  return {5, "instance '" .. ARGV[1] .. "' belongs to instance group '" .. tostring(group) ..
             "', not '" .. ARGV[2] .. "'"}
end
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
if group ~= '' then
  if redis.call('HINCRBY', KEYS[2], group, -1) <= 0 then redis.call('HDEL', KEYS[2], group) end
end
redis.call('INCR', KEYS[1])
redis.call('SET', KEYS[5], ARGV[3] .. '\n' .. group, 'PX', 60000)
return {1, group}
