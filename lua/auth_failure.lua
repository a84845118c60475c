-- auth_failure: count one failed password check against a (user, client address) pair, the user
-- and the address, and start or extend their back-off (exponential, capped) once the failures
-- pass the threshold.
--
-- KEYS[1] pair failures     hash {n = failures in the window, until = back-off end (ms)}
-- KEYS[2] user failures     hash, the same fields
-- KEYS[3] address failures  hash, the same fields
-- ARGV[1] now (unix ms)
-- ARGV[2] failures allowed before back-off starts (>= 1)
-- ARGV[3] first back-off (ms)
-- ARGV[4] longest back-off (ms)
-- ARGV[5] window (ms): counters expire this long after the last failure (or the back-off end)
-- ARGV[6] the call's id (random per failed check): a call the client resends after its reply
--         was lost finds its id in the pair's hash (`last`) and counts nothing twice
--
-- Reply: {1, until} where until is the latest back-off end of the three (ms; 0 = none yet).
-- Status codes: 1 only; bad arguments are a script error (the caller's bug, never the user's).
-- Example: pair n = 0, user n = 4, address n = 0, ARGV = {1000, 5, 1000, 900000, 900000}
--   -> pair n = 1; user n = 5, until = 2000; address n = 1; reply {1, 2000}.
if #KEYS ~= 3 or #ARGV ~= 6 then return redis.error_reply('auth_failure: expected 3 keys, 6 args') end
local now, after = tonumber(ARGV[1]), tonumber(ARGV[2])
local base, cap, window = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
if not (now and after and base and cap and window) or after < 1 or base < 1 or cap < base or window < 1 then
  return redis.error_reply('auth_failure: bad arguments')
end
local latest = 0
if #ARGV[6] > 0 and redis.call('HGET', KEYS[1], 'last') == ARGV[6] then
  -- This very failure, resent: it was counted; answer the back-off it set.
  for i = 1, 3 do
    local untl = tonumber(redis.call('HGET', KEYS[i], 'until') or '0')
    if untl > latest then latest = untl end
  end
  return {1, string.format('%d', latest)}
end
for i = 1, 3 do
  local n = redis.call('HINCRBY', KEYS[i], 'n', 1)
  local ttl = window
  if n >= after then
    local wait = base * 2 ^ math.min(n - after, 40)
    if wait > cap then wait = cap end
    local untl = now + wait
    redis.call('HSET', KEYS[i], 'until', string.format('%d', untl))
    if untl > latest then latest = untl end
    if wait > ttl then ttl = wait end
  end
  if i == 1 then redis.call('HSET', KEYS[1], 'last', ARGV[6]) end
  redis.call('PEXPIRE', KEYS[i], ttl)
end
return {1, string.format('%d', latest)}
