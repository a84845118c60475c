-- registry_add_account: add an account. The first account must be an admin (unless an admin API
-- key exists), so adding accounts can never leave a registry whose only credentials cannot
-- administer it.
--
-- KEYS[1] version   string counter
-- KEYS[2] accounts  hash user -> {"user_name", "role", "password_hash", "instance_groups"} JSON
-- KEYS[3] api_keys  hash key id -> {"role", …} JSON (only read: does an admin key exist?)
-- (admins() comes from lua/lib/accounts.lua.)
-- ARGV[1] user name
-- ARGV[2] account JSON (password already hashed by the caller)
-- ARGV[3] role name: "ROLE_ADMIN" or "ROLE_USER"
--
-- Reply: {1, new_version} (also for a resend of this very request) | {6, message} (exists) |
--        {5, message} (no admin yet)
-- Example: accounts = {}, api_keys = {}; ARGV = {"ops", "{...}", "ROLE_USER"} -> {5, "... ROLE_ADMIN ..."}.
if #KEYS ~= 3 or #ARGV ~= 3 then return redis.error_reply('registry_add_account: expected 3 keys, 3 args') end
local existing = redis.call('HGET', KEYS[2], ARGV[1])
-- This very request resent after a lost reply (the salted password hash makes an account's
-- JSON unique to the request that built it): done already.
if existing == ARGV[2] then return {1, tostring(redis.call('GET', KEYS[1]) or '0')} end
if existing then
  return {6, "account '" .. ARGV[1] .. "' already exists; delete it first to change its password or role"}
end
if ARGV[3] ~= 'ROLE_ADMIN' and admins(KEYS[2]) + admins(KEYS[3]) == 0 then
  return {5, "the first account must have role ROLE_ADMIN: the admin plane needs an admin once " ..
             "credentials are in use, and without one nobody could administer them"}
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return {1, tostring(redis.call('INCR', KEYS[1]))}
