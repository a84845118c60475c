-- registry_delete_account: delete an account, refusing to delete the last admin credential
-- (accounts and API keys with ROLE_ADMIN together): once an admin exists the admin plane
-- requires one, and deleting the last would either lock operators out or (as it once did) open
-- the admin plane to anyone. Add another admin first to replace it.
--
-- KEYS[1] version   string counter
-- KEYS[2] accounts  hash user -> account JSON
-- KEYS[3] api_keys  hash key id -> API key JSON (only read)
-- KEYS[4] removed   string `<call id>\n<reply>`, for 60 s after a removal went through
-- (admins() comes from lua/lib/accounts.lua.)
-- ARGV[1] user name
-- ARGV[2] call id   fresh per request (a resend carries the same)
--
-- Reply: {1, new_version} | {5, message} (unknown account, or the last admin).
-- A resend of a removal that went through (its reply lost with the connection: the same call id)
-- answers the first run's reply from KEYS[4]; another call gets the error.
-- Example: accounts = {root (admin), eng (user)}, api_keys = {}; ARGV = {"root"} -> {5, "... last ..."}.
if #KEYS ~= 4 or #ARGV ~= 2 then return redis.error_reply('registry_delete_account: expected 4 keys, 2 args') end
-- A resend of this very call (same call id) answers the first run's reply before anything else
-- is looked at: the name may exist again by now (created anew), and must not be removed twice.
local first = redis.call('GET', KEYS[4])
if first and first:sub(1, #ARGV[2] + 1) == ARGV[2] .. '\n' then return {1, first:sub(#ARGV[2] + 2)} end
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if not cur then
  return {5, "account '" .. ARGV[1] .. "' does not exist"}
end
local ok, a = pcall(cjson.decode, cur)
if ok and type(a) == 'table' and a['role'] == 'ROLE_ADMIN' and admins(KEYS[2]) + admins(KEYS[3]) <= 1 then
  return {5, "account '" .. ARGV[1] .. "' is the last ROLE_ADMIN credential and can never be deleted; " ..
             "add another admin first to replace it"}
end
redis.call('HDEL', KEYS[2], ARGV[1])
local version = tostring(redis.call('INCR', KEYS[1]))
redis.call('SET', KEYS[4], ARGV[2] .. '\n' .. version, 'PX', 60000)
return {1, version}
