-- registry_add_storage: add a storage unless one with the same name exists, and give it a
-- numeric id (what compact block records store). Ids are never reused, so blocks written on
-- a removed storage can never be mistaken for blocks of a new one with the same name.
--
-- The caller checked the new storage against every stored one (file-like roots must not nest,
-- validate::roots_disjoint) and passes what it read: the script writes only if the storages
-- hash is still exactly that, so two admins adding nested roots at once cannot both succeed
-- (the later one is told to retry, and its retry sees the other storage).
--
-- KEYS[1] version         string counter
-- KEYS[2] storages        hash name -> StorageConfig JSON
-- KEYS[3] storage_ids     hash name -> id
-- KEYS[4] storage_id_seq  string counter
-- ARGV[1] name      storage global_unique_name (validated by the caller)
-- ARGV[2] config    StorageConfig JSON
-- ARGV[3..] seen    name, JSON, name, JSON…: every storage the caller read (possibly none)
--
-- Reply: {1, new_version} (also when exactly this storage exists: a resend) | {6, message}
--        (exists with another configuration) | {-1, message} (storages changed since the
--        caller read them: the caller re-reads and retries; never a wire status) | {7, message} (65535 ids used up)
-- Example: storages = {} ; ARGV = {"nfs_01", "{...}"} -> storages = {nfs_01 = "{...}"},
--          storage_ids = {nfs_01 = 1}, {1, "1"}. Again with the same name -> {6, "... already exists ..."}.
--          storages = {a = A}; ARGV = {"b", B} (the caller saw no storage) -> {-1, "... changed ..."}.
if #KEYS ~= 4 or #ARGV < 2 or #ARGV % 2 ~= 0 then
  return redis.error_reply('registry_add_storage: expected 4 keys, 2 args + name/config pairs')
end
local existing = redis.call('HGET', KEYS[2], ARGV[1])
-- The same storage again — a client's resend after a lost reply, or an admin's repeated
-- request — is done already: answer as the first run did.
if existing == ARGV[2] then return {1, tostring(redis.call('GET', KEYS[1]) or '0')} end
if existing then
  return {6, "storage '" .. ARGV[1] .. "' already exists (with another configuration); use updateStorage to change it"}
end
local changed = {-1, "the storages changed while storage '" .. ARGV[1] .. "' was being checked against them; retry"}
if redis.call('HLEN', KEYS[2]) ~= (#ARGV - 2) / 2 then return changed end
for i = 3, #ARGV, 2 do
  if redis.call('HGET', KEYS[2], ARGV[i]) ~= ARGV[i + 1] then return changed end
end
if tonumber(redis.call('GET', KEYS[4]) or '0') >= 65535 then
  return {7, "65535 storages have been created in this namespace; no storage id is left"}
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[1], redis.call('INCR', KEYS[4]))
return {1, tostring(redis.call('INCR', KEYS[1]))}
