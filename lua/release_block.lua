-- release_block: the deleter's last step for one queued location, after its files are gone.
-- Removes the location's metadata (if still there), releases its slot in a packed file — queuing
-- the file itself for deletion when its last block is released — and acknowledges the stream
-- entry, all at once. Idempotent: a redelivered entry finds nothing left to remove.
--
-- KEYS[1] blocks  hash key -> block record
-- KEYS[2] files   hash packed file id -> blocks not yet released
-- KEYS[3] del     the deletion stream
-- KEYS[4] icount  hash block -> LFU read count (dropped with a block that no longer serves)
-- ARGV[1] consumer group name
-- ARGV[2] entry id
-- ARGV[3] block key (8 bytes)
-- ARGV[4] location bytes as queued (state byte ignored)
--
-- Reply: {1, removed (0/1), file_queued (0/1)}
-- Example: B has locations [D seq 7]; ARGV = {grp, id, B, loc7} -> B's record deleted (no
--          children), entry acked; reply {1, 1, 0}. For the last block of packed file F:
--          files[F] 1 -> deleted, del += {f = F, s = storage}; reply {1, 1, 1}.
if #KEYS ~= 4 or #ARGV ~= 4 then return redis.error_reply('release_block: expected 4 keys, 4 args') end
local key, want = ARGV[3], ARGV[4]
if #key ~= 8 or (#want ~= 14 and #want ~= 26) then return redis.error_reply('release_block: bad key or location') end
-- The entry is the once-only token: a redelivered entry that was already released (and
-- removed from the stream) must not release its packed-file slot again.
if #redis.call('XRANGE', KEYS[3], ARGV[2], ARGV[2]) == 0 then return {1, 0, 0} end
local removed, queued = drop_deleting(KEYS[1], KEYS[4], key, want), 0
if #want == 26 then
  local fid = want:sub(15, 26)
  -- No count (dropped by TS_REMOVE_ALL_META): the file is not kvcm's to delete any more.
  local left = 1
  if redis.call('HEXISTS', KEYS[2], fid) == 1 then left = redis.call('HINCRBY', KEYS[2], fid, -1) end
  if left <= 0 then
    redis.call('HDEL', KEYS[2], fid)
    redis.call('XADD', KEYS[3], '*', 'f', fid, 'l', want, 'r', 'file_released')
    queued = 1
  end
end
redis.call('XACK', KEYS[3], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[3], ARGV[2])
return {1, removed, queued}
