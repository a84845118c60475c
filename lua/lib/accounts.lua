-- lib/accounts.lua: put before the credential scripts (registry_add_account,
-- registry_delete_account, registry_revoke_api_key) by core/src/scripts.rs.

-- The number of credentials with ROLE_ADMIN in a hash of account or API key JSON records.
local function admins(hash)
  local n = 0
  for _, v in ipairs(redis.call('HVALS', hash)) do
    local ok, a = pcall(cjson.decode, v)
    if ok and type(a) == 'table' and a['role'] == 'ROLE_ADMIN' then n = n + 1 end
  end
  return n
end
