-- remove_cache: marks every location of the given blocks `deleting` (invisible to reads at
-- once), takes serving ones out of usage and the eviction indexes, and queues each location
-- for physical deletion in the same step. Optionally only locations written in [begin, end).
--
-- KEYS[1] blocks  hash key -> block record
-- KEYS[2] usage   hash b<storage>/n<storage>
-- KEYS[3] lru     zset leaf -> last access ms
-- KEYS[4] lfu     zset leaf -> LFU-DA priority
-- KEYS[5] itouch  zset interior block -> last access ms
-- KEYS[6] del     stream of locations to delete physically
-- KEYS[7] icount  hash block -> LFU read count (a removed block's passes to its parent)
-- ARGV[1] bytes per spec group, comma separated, index 0 = every spec
-- ARGV[2] begin, unix s (inclusive) — "0" for any
-- ARGV[3] end, unix s (exclusive) — "4294967296" for any
-- ARGV[4..] block keys, 8 bytes each
--
-- Reply: {1, locations marked}; a bad argument (a bug of the caller) is an error reply.
-- Example: B serving (child of A) -> B's location 'D', usage -bytes, B out of lru, A becomes a
--          leaf with B's recency, one entry {k=B, l=loc, r=removed} on `del`; reply {1, 1}.
if #KEYS ~= 7 or #ARGV < 3 then return redis.error_reply('remove_cache: expected 7 keys, >= 3 args') end
local sizes = {}
for s in string.gmatch(ARGV[1], '[^,]+') do sizes[#sizes + 1] = tonumber(s) end
local b, e = tonumber(ARGV[2]), tonumber(ARGV[3])
if not b or not e then return redis.error_reply('remove_cache: begin and end must be numbers') end
for i = 4, #ARGV do
  if #ARGV[i] ~= 8 then return redis.error_reply('remove_cache: block key ' .. (i - 3) .. ' is not 8 bytes') end
end
local K = {blocks = KEYS[1], usage = KEYS[2], lru = KEYS[3], lfu = KEYS[4], itouch = KEYS[5], del = KEYS[6],
  icount = KEYS[7]}
local marked = 0
for i = 4, #ARGV do
  local key = ARGV[i]
  local rec = redis.call('HGET', K.blocks, key)
  if rec then
    local was_serving = false
    for _, p in ipairs(locs(rec)) do
      local st, w = loc_state(rec, p), loc_written(rec, p)
      if (st == 'S' or st == 'W') and w >= b and w < e then
        rec = set_state(rec, p, 'D')
        if st == 'S' then
          was_serving = true
          usage_add(K, loc_storage(rec, p), -(sizes[loc_group(rec, p) + 1] or 0), -1)
          queue_delete(K, key, loc_bytes(rec, p), 'removed')
        end
        -- A writing location is queued by its session's finish or expiry, once the engine
        -- has stopped writing it.
        marked = marked + 1
      end
    end
    redis.call('HSET', K.blocks, key, rec)
    if was_serving and not has_state(rec, 'S') then unlink_serving(K, key, rec) end
  end
end
return {1, marked}
