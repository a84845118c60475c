-- lease_release: gives a reclaim lease back if the caller still holds it.
--
-- KEYS[1] lease  string `<token>:<worker>`
-- ARGV[1] the lease value the caller holds
--
-- Reply: {1, 1} released | {1, 0} not held (expired or taken over: nothing to do)
-- Example: lease = "7:w1"; ARGV = {"7:w1"} -> lease deleted; reply {1, 1}.
if #KEYS ~= 1 or #ARGV ~= 1 then return redis.error_reply('lease_release: expected 1 key, 1 arg') end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return {1, 1}
end
return {1, 0}
