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
-- Example: trash = {A: [S], B: [S, D]}; N = 10 -> del += 2 entries (r = trim_all; B's D has
--          its own entry already), trash gone, trash entry acked; reply {1, 2, 1}.
if #KEYS ~= 2 or #ARGV ~= 3 then return redis.error_reply('expand_trash: expected 2 keys, 3 args') end
local n = tonumber(ARGV[3])
if not n or n < 1 or n > 1000 then return redis.error_reply('expand_trash: N must be within 1..1000') end
-- Redelivered after it was completed: nothing to do.
if #redis.call('XRANGE', KEYS[2], ARGV[2], ARGV[2]) == 0 then return {1, 0, 1} end
-- HRANDFIELD, not HSCAN from cursor 0: after many HDELs the first buckets are empty and a
-- cursor-0 scan would return nothing while records remain.
local page = redis.call('HRANDFIELD', KEYS[1], n, 'WITHVALUES')
local done_records = 0
for i = 1, #page, 2 do
  local key, rec = page[i], page[i + 1]
  for _, p in ipairs(locs(rec)) do
    -- Deleting locations already have their own entries; writing ones are queued by their
    -- session's finish or expiry.
    if loc_state(rec, p) == 'S' then
      redis.call('XADD', KEYS[2], '*', 'k', key, 'l', loc_bytes(rec, p), 'r', 'trim_all')
    end
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
