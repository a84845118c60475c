-- registry_revoke_api_key: delete an API key; requests carrying it are refused from then on. The
-- last admin credential (accounts and API keys with ROLE_ADMIN together) can never be revoked.
--
-- KEYS[1] version   string counter
-- KEYS[2] api_keys  hash key id -> API key JSON
-- KEYS[3] accounts  hash user -> account JSON (only read)
-- KEYS[4] removed   string `<call id>\n<reply>`, for 60 s after a removal went through
-- (admins() comes from lua/lib/accounts.lua.)
-- ARGV[1] key id
-- ARGV[2] call id   fresh per request (a resend carries the same)
--
-- Reply: {1, new_version} | {5, message} (no such key, or the last admin).
-- A resend of a removal that went through (its reply lost with the connection: the same call id)
-- answers the first run's reply from KEYS[4]; another call gets the error.
-- Example: api_keys = {"0f3a…": "{…ROLE_USER…}"}; ARGV = {"0f3a…"} -> {1, "9"}, api_keys = {}.
if #KEYS ~= 4 or #ARGV ~= 2 then return redis.error_reply('registry_revoke_api_key: expected 4 keys, 2 args') end
-- A resend of this very call (same call id) answers the first run's reply before anything else
-- is looked at: the name may exist again by now (created anew), and must not be removed twice.
local first = redis.call('GET', KEYS[4])
if first and first:sub(1, #ARGV[2] + 1) == ARGV[2] .. '\n' then return {1, first:sub(#ARGV[2] + 2)} end
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
local version = tostring(redis.call('INCR', KEYS[1]))
redis.call('SET', KEYS[4], ARGV[2] .. '\n' .. version, 'PX', 60000)
return {1, version}
