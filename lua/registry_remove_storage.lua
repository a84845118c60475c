-- registry_remove_storage: remove a storage no instance group uses.
--
-- KEYS[1] version            string counter
-- KEYS[2] storages           hash name -> StorageConfig JSON
-- KEYS[3] storages_disabled  set of disabled names
-- KEYS[4] groups             hash name -> InstanceGroup JSON
-- KEYS[5] storage_ids        hash name -> id
-- KEYS[6] storages_unhealthy set of unhealthy names
-- KEYS[7] removed            string `<call id>\n<reply>`, for 60 s after a removal went through
-- KEYS[8] removed_storages   hash id -> the removed storage's JSON (for late deletions)
-- ARGV[1] name               storage name
-- ARGV[2] call id            fresh per request (a resend carries the same)
--
-- Reply: {1, new_version} | {5, message} (unknown storage, or still used: names the group).
-- A resend of a removal that went through (its reply lost with the connection: the same call id)
-- answers the first run's reply from KEYS[7]; another call gets the error.
-- Example: groups = {g1 = {storage_candidates = ["nfs_01"]}}; ARGV = {"nfs_01"}
--          -> {5, "storage 'nfs_01' is used by instance group 'g1' ..."}, nothing changes.
if #KEYS ~= 8 or #ARGV ~= 2 then return redis.error_reply('registry_remove_storage: expected 8 keys, 2 args') end
-- A resend of this very call (same call id) answers the first run's reply before anything else
-- is looked at: the name may exist again by now (created anew), and must not be removed twice.
local first = redis.call('GET', KEYS[7])
if first and first:sub(1, #ARGV[2] + 1) == ARGV[2] .. '\n' then return {1, first:sub(#ARGV[2] + 2)} end
local name = ARGV[1]
if redis.call('HEXISTS', KEYS[2], name) == 0 then
  return {5, "storage '" .. name .. "' does not exist"}
end
local groups = redis.call('HGETALL', KEYS[4])
for i = 1, #groups, 2 do
  local ok, g = pcall(cjson.decode, groups[i + 1])
  if ok and type(g) == 'table' then
    for _, list in ipairs({'storage_candidates', 'event_report_storage_candidates'}) do
      local cands = g[list]
      if type(cands) == 'table' then
        for _, c in ipairs(cands) do
          if c == name then
            return {5, "storage '" .. name .. "' is used by instance group '" .. groups[i] ..
                       "'; remove it from the group's " .. list .. " first"}
          end
        end
      end
    end
  end
end
-- The configuration stays reachable by id: files of stragglers on it can still be deleted.
local id = redis.call('HGET', KEYS[5], name)
if id then redis.call('HSET', KEYS[8], id, redis.call('HGET', KEYS[2], name)) end
redis.call('HDEL', KEYS[2], name)
redis.call('SREM', KEYS[3], name)
redis.call('HDEL', KEYS[5], name)
redis.call('SREM', KEYS[6], name)
local version = tostring(redis.call('INCR', KEYS[1]))
redis.call('SET', KEYS[7], ARGV[2] .. '\n' .. version, 'PX', 60000)
return {1, version}
