-- touch: a read's recency and frequency bookkeeping, for the deepest block the read hit. The
-- frontend sends it after the read's reply (a hint: a lost touch only ages the block), so the
-- block is checked here, as it is now: a leaf gets its recency and LFU priority bumped, an
-- interior serving block its interior touch; a block evicted or removed meanwhile gets nothing
-- (no index entry outlives its block).
--
-- Both kinds add one read to the block's count (`<block>n` in itouch, lib/record.lua): the
-- reads that ended at the block or, once its children are evicted, below it. A block that
-- becomes a leaf again starts from its last child's priority plus that count, so a prefix is
-- ranked by every read that went through it, as LFU ranks it, though a read touches one block.
--
-- KEYS[1] blocks  KEYS[2] lru  KEYS[3] lfu  KEYS[4] itouch
-- ARGV[1] the block key (8 bytes)  ARGV[2] now (ms)
-- Reply: {1, 1 leaf | 2 interior | 0 neither}
-- Example: chain A <- B serving, B read: lru[B] = now, lfu[B] + 1, itouch[Bn] + 1 -> {1, 1};
--          then A read: itouch[A] = now, itouch[An] + 1 -> {1, 2}.
if #KEYS ~= 4 or #ARGV ~= 2 then return redis.error_reply('touch: expected 4 keys, 2 args') end
local key, now = ARGV[1], ARGV[2]
if redis.call('ZADD', KEYS[3], 'XX', 'INCR', 1, key) then
  redis.call('ZADD', KEYS[2], 'XX', now, key)
  redis.call('ZINCRBY', KEYS[4], 1, key .. 'n')
  return {1, 1}
end
local rec = redis.call('HGET', KEYS[1], key)
if rec and rec_children(rec) > 0 and has_state(rec, 'S') then
  redis.call('ZADD', KEYS[4], now, key)
  redis.call('ZINCRBY', KEYS[4], 1, key .. 'n')
  return {1, 2}
end
return {1, 0}
