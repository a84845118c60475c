-- prune_touch: drops, for the given blocks, read bookkeeping that outlived its block (the
-- worker's background collection, worker/src/touch_gc.rs). A read's touch is a pipeline sent
-- after the read (core/src/store/get_cache_location.rs): its `ZADD itouch` and `HINCRBY icount`
-- create their entry when it is missing, so a touch that lands after its block was unlinked (and,
-- for a count, after the deleter released the block: drop_deleting) leaves an entry that nothing
-- else removes, as does one that lands after a trim or a removeInstance. Entries are kept only
-- while their block serves; the indexes `lru` and `lfu` need no collection (a leaf's touch is
-- `ZADD XX`, which never adds).
--
-- KEYS[1] blocks  hash key -> block record (lua/lib/record.lua)
-- KEYS[2] itouch  zset interior block -> last access ms
-- KEYS[3] icount  hash block -> LFU read count
-- ARGV[1..] block keys (8 bytes each), at most 1,024
--
-- Reply: {1, itouch entries dropped, icount entries dropped}
-- Example: A serving, B's record gone, C only being written ('W'); itouch = {A, B},
--          icount = {A: 3, C: 1}; ARGV = {A, B, C} -> itouch = {A}, icount = {A: 3};
--          reply {1, 1, 1}.
if #KEYS ~= 3 or #ARGV < 1 or #ARGV > 1024 then
  return redis.error_reply('prune_touch: expected 3 keys and 1..1024 block keys')
end
for i = 1, #ARGV do
  if #ARGV[i] ~= 8 then return redis.error_reply('prune_touch: block keys are 8 bytes') end
end
local touches, counts = 0, 0
for i = 1, #ARGV do
  local key = ARGV[i]
  local rec = redis.call('HGET', KEYS[1], key)
  if not rec or not has_state(rec, 'S') then
    touches = touches + redis.call('ZREM', KEYS[2], key)
    counts = counts + redis.call('HDEL', KEYS[3], key)
  end
end
return {1, touches, counts}
