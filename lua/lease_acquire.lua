-- lease_acquire: takes or renews a worker's reclaim lease on one instance. A new lease gets a
-- new fencing token (a counter), so a worker that lost its lease (paused past expiry) cannot
-- act on the instance again: scripts it calls compare the whole lease value.
--
-- KEYS[1] lease      string `<token>:<worker>`, with a TTL
-- KEYS[2] lease_seq  counter of tokens
-- ARGV[1] worker id
-- ARGV[2] lease time, ms
--
-- Reply: {1, lease value} (taken or renewed) | {1, "", holder} (another worker holds it) |
--        an error reply for a bad argument (a bug of the caller, never read as "held")
-- Example: no lease; ARGV = {"w1", 5000} -> lease = "7:w1" PX 5000; reply {1, "7:w1"}.
--          Again by w1 -> PEXPIRE, {1, "7:w1"}; by w2 -> {1, "", "7:w1"}.
if #KEYS ~= 2 or #ARGV ~= 2 then return redis.error_reply('lease_acquire: expected 2 keys, 2 args') end
local ms = tonumber(ARGV[2])
if not ms or ms < 1 then return redis.error_reply('lease_acquire: lease time must be positive') end
local cur = redis.call('GET', KEYS[1])
if cur then
  if cur:match('^%d+:(.*)$') == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ms)
    return {1, cur}
  end
  return {1, '', cur}
end
local value = redis.call('INCR', KEYS[2]) .. ':' .. ARGV[1]
redis.call('SET', KEYS[1], value, 'PX', ms)
return {1, value}
