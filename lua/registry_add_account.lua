-- registry_add_account: add an account. The first account must be an admin, so adding
-- accounts (which turns on authentication) can never lock operators out.
--
-- KEYS[1] version   string counter
-- KEYS[2] accounts  hash user -> {"user_name", "role", "password_hash"} JSON
-- ARGV[1] user name
-- ARGV[2] account JSON (password already hashed by the caller)
-- ARGV[3] role name: "ROLE_ADMIN" or "ROLE_USER"
--
-- Reply: {1, new_version} | {6, message} (exists) | {5, message} (would lock out admins)
-- Example: accounts = {}; ARGV = {"ops", "{...}", "ROLE_USER"} -> {5, "... add an admin first"}.
if #KEYS ~= 2 or #ARGV ~= 3 then return redis.error_reply('registry_add_account: expected 2 keys, 3 args') end
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then
  return {6, "account '" .. ARGV[1] .. "' already exists; delete it first to change its password or role"}
end
if ARGV[3] ~= 'ROLE_ADMIN' then
  local has_admin = false
  for _, v in ipairs(redis.call('HVALS', KEYS[2])) do
    local ok, a = pcall(cjson.decode, v)
    if ok and type(a) == 'table' and a['role'] == 'ROLE_ADMIN' then has_admin = true break end
  end
  if not has_admin then
    return {5, "the first account must have role ROLE_ADMIN: accounts turn on authentication " ..
               "of the admin plane, and without an admin nobody could use it"}
  end
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return {1, tostring(redis.call('INCR', KEYS[1]))}
