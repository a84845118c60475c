-- registry_revoke_api_key: delete an API key; requests carrying it are refused from then on.
--
-- KEYS[1] version   string counter
-- KEYS[2] api_keys  hash key id -> API key JSON
-- ARGV[1] key id
--
-- Reply: {1, new_version} | {5, message} (no such key)
-- Example: api_keys = {"0f3a…": "{...}"}; ARGV = {"0f3a…"} -> {1, "9"}, api_keys = {}.
if #KEYS ~= 2 or #ARGV ~= 1 then return redis.error_reply('registry_revoke_api_key: expected 2 keys, 1 arg') end
if redis.call('HDEL', KEYS[2], ARGV[1]) == 0 then
  return {5, "API key '" .. ARGV[1] .. "' does not exist (already revoked?); listApiKeys shows the keys"}
end
return {1, tostring(redis.call('INCR', KEYS[1]))}
