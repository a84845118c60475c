-- trim_all_meta: TS_REMOVE_ALL_META. Drops the instance's block metadata, usage and eviction
-- indexes without touching storage (nothing is queued for deletion). Open write sessions stay
-- registered; their finish finds no blocks and stores nothing. Deletions already queued are
-- kept: they describe data that is still on storage.
--
-- KEYS[1] blocks  KEYS[2] usage  KEYS[3] lru  KEYS[4] lfu  KEYS[5] itouch  KEYS[6] files
-- KEYS[7] icount  KEYS[8] adaptive  KEYS[9] ighost (the `adaptive` policy's state, lua/evict.lua)
-- ARGV    none
--
-- Reply: {1, blocks dropped}
-- Example: blocks = {A, B} -> every listed key gone; reply {1, 2}.
if #KEYS ~= 9 or #ARGV ~= 0 then return redis.error_reply('trim_all_meta: expected 9 keys, 0 args') end
local n = redis.call('HLEN', KEYS[1])
redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9])
return {1, n}
