-- registry_add_api_key: store a new API key (its token's SHA-256, never the token).
--
-- KEYS[1] version   string counter
-- KEYS[2] api_keys  hash key id -> {"key_id", "name", "role", "instance_groups", "token_sha256",
--                   "create_time_ms"} JSON
-- ARGV[1] key id (16 hex digits, random)
-- ARGV[2] key JSON
--
-- Reply: {1, new_version} (also for a resend of this very request) | {6, message} (the random
--        key id collided: the caller draws another)
-- Example: api_keys = {}; ARGV = {"0f3a…", "{...}"} -> {1, "8"}, api_keys = {"0f3a…": "{...}"}.
if #KEYS ~= 2 or #ARGV ~= 2 then return redis.error_reply('registry_add_api_key: expected 2 keys, 2 args') end
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 0 then
  -- This very request resent after a lost reply (the key id and token hash are the request's
  -- own): done already.
  if redis.call('HGET', KEYS[2], ARGV[1]) == ARGV[2] then return {1, tostring(redis.call('GET', KEYS[1]) or '0')} end
  return {6, "API key id '" .. ARGV[1] .. "' already exists"}
end
return {1, tostring(redis.call('INCR', KEYS[1]))}
