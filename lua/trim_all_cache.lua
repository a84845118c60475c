-- trim_all_cache: TS_REMOVE_ALL_CACHE in O(1). The whole `blocks` hash is renamed to a trash
-- key and one entry naming it is queued on the deletion stream in the same step, so every block
-- vanishes from reads at once and none is lost: the deleter expands the trash entry and deletes
-- every location in it. Usage and eviction indexes are reset.
--
-- KEYS[1] blocks  hash key -> block record
-- KEYS[2] trash   a new key (same hash tag), random per call, that receives the blocks
-- KEYS[3] usage   KEYS[4] lru   KEYS[5] lfu   KEYS[6] itouch
-- KEYS[7] del     stream of locations to delete physically
-- KEYS[8] icount  hash block -> LFU read count
-- KEYS[9] adaptive  KEYS[10] ighost  the `adaptive` policy's state (lua/evict.lua)
-- ARGV    none
--
-- Reply: {1, blocks trashed}. The trash key existing already means this very call ran before (its
-- name is the call's random id; the client resent it after its reply was lost): answered
-- {1, blocks still in the trash} without trimming again (what was written since stays).
-- Example: blocks = {A, B} -> trash = {A, B}, blocks/usage/lru/lfu/itouch/icount/adaptive/ighost gone,
--          del += {trash = <KEYS[2]>, r = trim_all}; reply {1, 2}.
if #KEYS ~= 10 or #ARGV ~= 0 then return redis.error_reply('trim_all_cache: expected 10 keys, 0 args') end
if redis.call('EXISTS', KEYS[2]) == 1 then return {1, redis.call('HLEN', KEYS[2])} end
local n = redis.call('HLEN', KEYS[1])
if n > 0 then
  redis.call('RENAME', KEYS[1], KEYS[2])
  redis.call('XADD', KEYS[7], '*', 'trash', KEYS[2], 'r', 'trim_all')
end
redis.call('DEL', KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[8], KEYS[9], KEYS[10])
return {1, n}
