-- drop_orphan_adaptive: drops the `adaptive` policy's state of an instance removed from the
-- registry (the worker's touch-gc, worker/src/touch_gc.rs, for an instance its scan finds that the
-- registry does not hold). A frontend counts an instance's
-- hits for up to 100 ms before its `HINCRBY`s land (core/src/store/get_cache_location.rs,
-- PendingHits), so a batch that lands after a removeInstance re-creates the `adaptive` hash;
-- nothing else removes it. Only an instance with no block left loses it: one re-registered in
-- the meantime and writing again keeps what it has counted.
--
-- KEYS[1] blocks  KEYS[2] adaptive  KEYS[3] ighost (core/src/keys.rs)
-- ARGV    none
--
-- Reply: {1, keys deleted}
-- Example: blocks gone, adaptive = {h3: 1000, events: 1} -> adaptive gone; reply {1, 1}.
--          blocks = {A: …} -> nothing changes; reply {1, 0}.
if #KEYS ~= 3 or #ARGV ~= 0 then return redis.error_reply('drop_orphan_adaptive: expected 3 keys, 0 args') end
if redis.call('EXISTS', KEYS[1]) == 1 then return {1, 0} end
return {1, redis.call('DEL', KEYS[2], KEYS[3])}
