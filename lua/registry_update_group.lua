-- registry_update_group: optimistic update of an instance group. The stored group's version
-- must equal current_version (the caller has checked that the new version is larger). Its
-- candidate storages need not exist yet (see registry_create_group.lua).
--
-- KEYS[1] version   string counter
-- KEYS[2] groups    hash name -> InstanceGroup JSON
-- ARGV[1] name             group name
-- ARGV[2] group            new InstanceGroup JSON
-- ARGV[3] current_version  decimal string, compared with the stored "version" exactly
--
-- Reply: {1, new_version} | {5, message} (unknown group) | {5, message} (version conflict).
-- When the stored group already is ARGV[2] (a resend of an update that went through), {1, version}.
-- Example: groups = {g1 = {version = "1"}}; ARGV = {"g1", "{..version 2..}", "1"}
--          -> groups = {g1 = {version = "2"}}. With ARGV[3] = "5" -> {5, "... has version 1 ..."}.
if #KEYS ~= 2 or #ARGV ~= 3 then return redis.error_reply('registry_update_group: expected 2 keys, 3 args') end
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if not cur then
  return {5, "instance group '" .. ARGV[1] .. "' does not exist; create it with createInstanceGroup"}
end
if cur == ARGV[2] then
  -- Exactly what this update writes is stored: a resend of an update that went through (its
  -- reply lost with the connection), or the same update made twice. Either way, done.
  return {1, redis.call('GET', KEYS[1]) or '0'}
end
local ok, g = pcall(cjson.decode, cur)
local stored = ok and type(g) == 'table' and tostring(g['version']) or '?'
if stored ~= ARGV[3] then
  return {5, "instance group '" .. ARGV[1] .. "' has version " .. stored .. ", not current_version " ..
             ARGV[3] .. "; read it again with getInstanceGroup and retry"}
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return {1, tostring(redis.call('INCR', KEYS[1]))}
