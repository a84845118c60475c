-- registry_revoke_api_key: delete an API key; requests carrying it are refused from then on. The
-- last admin credential (accounts and API keys with ROLE_ADMIN together) can never be revoked.
--
-- KEYS[1] version   string counter
-- KEYS[2] api_keys  hash key id -> API key JSON
-- KEYS[3] accounts  hash user -> account JSON (only read)
-- (admins() comes from lua/lib/accounts.lua.)
-- ARGV[1] key id
--
-- Reply: {1, new_version} | {5, message} (no such key, or the last admin)
-- Example: api_keys = {"0f3a…": "{…ROLE_USER…}"}; ARGV = {"0f3a…"} -> {1, "9"}, api_keys = {}.
if #KEYS ~= 3 or #ARGV ~= 1 then return redis.error_reply('registry_revoke_api_key: expected 3 keys, 1 arg') end
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if not cur then
  return {5, "API key '" .. ARGV[1] .. "' does not exist (already revoked?); listApiKeys shows the keys"}
end
local ok, k = pcall(cjson.decode, cur)
if ok and type(k) == 'table' and k['role'] == 'ROLE_ADMIN' and admins(KEYS[2]) + admins(KEYS[3]) <= 1 then
  return {5, "API key '" .. ARGV[1] .. "' is the last ROLE_ADMIN credential and can never be revoked; " ..
             "add another admin first to replace it"}
end
redis.call('HDEL', KEYS[2], ARGV[1])
return {1, tostring(redis.call('INCR', KEYS[1]))}
