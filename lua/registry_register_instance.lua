-- registry_register_instance: register an instance in a group, idempotently.
--
-- KEYS[1] version          string counter
-- KEYS[2] groups           hash name -> InstanceGroup JSON
-- KEYS[3] group_instances  hash group -> instance count
-- KEYS[4] instances        hash id -> InstanceInfo JSON
-- KEYS[5] instance_fp      hash id -> registration fingerprint
-- ARGV[1] instance_id
-- ARGV[2] group name
-- ARGV[3] InstanceInfo JSON
-- ARGV[4] fingerprint of everything that must match on re-registration (computed by the caller:
--         group, block_size, spec infos in order, model deployment without user_data, spec groups)
--
-- Reply: {1, "created"} | {1, "exists"} (same fingerprint: nothing changes)
--      | {6, stored InstanceInfo JSON} (registered with something different)
--      | {5, message} (unknown group) | {7, message} (group at max_instance_count)
-- Example: group g1 (max 1) empty; ARGV = {"i1", "g1", "{...}", "fp1"} -> {1, "created"}, count 1.
--          Same again -> {1, "exists"}. ARGV[4] = "fp2" -> {6, "{...stored...}"}.
--          ARGV[1] = "i2" -> {7, "instance group 'g1' already has 1 instance(s) ..."}.
if #KEYS ~= 5 or #ARGV ~= 4 then return redis.error_reply('registry_register_instance: expected 5 keys, 4 args') end
local id, group = ARGV[1], ARGV[2]
local g = redis.call('HGET', KEYS[2], group)
if not g then
  return {5, "instance group '" .. group .. "' does not exist; create it with createInstanceGroup"}
end
local fp = redis.call('HGET', KEYS[5], id)
if fp then
  if fp == ARGV[4] then return {1, 'exists'} end
  return {6, redis.call('HGET', KEYS[4], id) or '{}'}
end
local ok, gobj = pcall(cjson.decode, g)
local max = ok and type(gobj) == 'table' and tonumber(gobj['max_instance_count']) or 0
local n = tonumber(redis.call('HGET', KEYS[3], group) or '0')
if max and max > 0 and n >= max then
  return {7, "instance group '" .. group .. "' already has " .. n ..
             " instance(s), its max_instance_count; raise it with updateInstanceGroup or remove instances"}
end
redis.call('HSET', KEYS[4], id, ARGV[3])
redis.call('HSET', KEYS[5], id, ARGV[4])
redis.call('HINCRBY', KEYS[3], group, 1)
redis.call('INCR', KEYS[1])
return {1, 'created'}
