-- registry_delete_account: delete an account, refusing to delete the last admin credential
-- (accounts and API keys with ROLE_ADMIN together): once an admin exists the admin plane
-- requires one, and deleting the last would either lock operators out or (as it once did) open
-- the admin plane to anyone. Add another admin first to replace it.
--
-- KEYS[1] version   string counter
-- KEYS[2] accounts  hash user -> account JSON
-- KEYS[3] api_keys  hash key id -> API key JSON (only read)
-- (admins() comes from lua/lib/accounts.lua.)
-- ARGV[1] user name
--
-- Reply: {1, new_version} | {5, message} (unknown account, or the last admin)
-- Example: accounts = {root (admin), eng (user)}, api_keys = {}; ARGV = {"root"} -> {5, "... last ..."}.
if #KEYS ~= 3 or #ARGV ~= 1 then return redis.error_reply('registry_delete_account: expected 3 keys, 1 arg') end
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if not cur then return {5, "account '" .. ARGV[1] .. "' does not exist"} end
local ok, a = pcall(cjson.decode, cur)
if ok and type(a) == 'table' and a['role'] == 'ROLE_ADMIN' and admins(KEYS[2]) + admins(KEYS[3]) <= 1 then
  return {5, "account '" .. ARGV[1] .. "' is the last ROLE_ADMIN credential and can never be deleted; " ..
             "add another admin first to replace it"}
end
redis.call('HDEL', KEYS[2], ARGV[1])
return {1, tostring(redis.call('INCR', KEYS[1]))}
