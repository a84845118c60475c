-- registry_delete_account: delete an account, refusing to delete the last admin: once an admin
-- exists the admin plane requires one, and deleting the last would either lock operators out or
-- (as it once did) open the admin plane to anyone. Add another admin first to replace it.
--
-- KEYS[1] version   string counter
-- KEYS[2] accounts  hash user -> account JSON
-- ARGV[1] user name
--
-- Reply: {1, new_version} | {5, message} (unknown account, or last admin)
-- Example: accounts = {root (admin), eng (user)}; ARGV = {"root"} -> {5, "... last ROLE_ADMIN ..."}.
if #KEYS ~= 2 or #ARGV ~= 1 then return redis.error_reply('registry_delete_account: expected 2 keys, 1 arg') end
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if not cur then return {5, "account '" .. ARGV[1] .. "' does not exist"} end
local ok, a = pcall(cjson.decode, cur)
if ok and type(a) == 'table' and a['role'] == 'ROLE_ADMIN' then
  local admins = 0
  for _, v in ipairs(redis.call('HVALS', KEYS[2])) do
    local ok2, b = pcall(cjson.decode, v)
    if ok2 and type(b) == 'table' and b['role'] == 'ROLE_ADMIN' then admins = admins + 1 end
  end
  if admins <= 1 then
    return {5, "account '" .. ARGV[1] .. "' is the last ROLE_ADMIN account and can never be deleted; " ..
               "add another admin first to replace it"}
  end
end
redis.call('HDEL', KEYS[2], ARGV[1])
return {1, tostring(redis.call('INCR', KEYS[1]))}
