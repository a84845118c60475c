-- expand_trash: turns up to N records of a trash hash (from trim_all_cache) into ordinary
-- per-location deletion entries, removing them from the trash in the same step, so every
-- location is queued exactly once. When the trash is empty, the trash entry is acknowledged.
--
-- KEYS[1] trash   hash key -> block record (renamed from `blocks`)
-- KEYS[2] del     the deletion stream
-- ARGV[1] consumer group name
-- ARGV[2] the trash entry's id
-- ARGV[3] N, records per call (1..1000)
--
-- Reply: {1, records expanded, done (0/1)}
-- Example: trash = {A: [S], B: [W, D]}; N = 10 -> del += 3 entries (r = trim_all), trash gone,
--          trash entry acked; reply {1, 2, 1}.
if #KEYS ~= 2 or #ARGV ~= 3 then return redis.error_reply('expand_trash: expected 2 keys, 3 args') end
local n = tonumber(ARGV[3])
if not n or n < 1 or n > 1000 then return {5, 'N must be within 1..1000'} end
local page = redis.call('HSCAN', KEYS[1], 0, 'COUNT', n)[2]
local done_records = 0
for i = 1, #page, 2 do
  local key, rec = page[i], page[i + 1]
  for _, p in ipairs(locs(rec)) do
    redis.call('XADD', KEYS[2], '*', 'k', key, 'l', loc_bytes(rec, p), 'r', 'trim_all')
  end
  redis.call('HDEL', KEYS[1], key)
  done_records = done_records + 1
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
  redis.call('XDEL', KEYS[2], ARGV[2])
  return {1, done_records, 1}
end
return {1, done_records, 0}
