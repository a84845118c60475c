-- dead_letter: the deleter gives up on one queued deletion after its retries. Atomically moves
-- the entry to the instance's dead-letter stream (with the error and the attempts), acks and
-- removes it from the deletion stream, forgets its failure count, and drops the location it was
-- deleting from the block's record — so the key is not held in state 'X' (or 'D') for good: a
-- write of it can start again, and prefixes through it can hit again once it is rewritten. The
-- dead letter keeps the key and location bytes, so re-driving it goes through claim_delete, which
-- keeps a file that a newer write of the key owns, and release_block, which releases a packed
-- file's slot.
--
-- KEYS[1] blocks    hash key -> block record
-- KEYS[2] del       the deletion stream
-- KEYS[3] del_dead  the dead-letter stream
-- KEYS[4] del_fail  hash entry id -> failed attempts, entry id ':t' -> next retry (ms),
--                   entry id ':hung' -> 1 once an attempt timed out
-- KEYS[5] icount    hash block -> LFU read count (dropped with a block that no longer serves)
-- ARGV[1] consumer group name
-- ARGV[2] entry id
-- ARGV[3] block key (8 bytes), or '' for an entry without one (a packed file's own deletion)
-- ARGV[4] location bytes as queued (14 or 26), or ''
-- ARGV[5] the dead-letter stream's bound (worker.max_dead_letters, >= 1)
-- ARGV[6..] field, value pairs of the dead letter (the entry's fields, error, attempts, entry)
--
-- Reply: {1, released} (1: a location was dropped from the key's record) | {1, -1} (the entry
--        was already gone: nothing done) | {1, -2} (the dead-letter stream is full: nothing
--        done; the entry stays queued, so nothing is forgotten)
-- Example: B has [X seq 3]; entry 5-0 {k = B, l = loc3, r = removed} fails for good, bound
--          100000 ->
--          B's record deleted (no children), del_dead += {k, l, r, error, attempts, entry = 5-0},
--          5-0 acked and removed; reply {1, 1}.
if #KEYS ~= 5 or #ARGV < 5 or (#ARGV - 5) % 2 ~= 0 then
  return redis.error_reply('dead_letter: expected 5 keys, 5 args and field/value pairs')
end
local bound = tonumber(ARGV[5])
if not bound or bound < 1 then return redis.error_reply('dead_letter: bad bound') end
if #redis.call('XRANGE', KEYS[2], ARGV[2], ARGV[2]) == 0 then return {1, -1} end
if redis.call('XLEN', KEYS[3]) >= bound then return {1, -2} end
local key, want = ARGV[3], ARGV[4]
local released = 0
if #key == 8 and (#want == 14 or #want == 26) then released = drop_deleting(KEYS[1], KEYS[5], key, want) end
if #ARGV > 5 then
  redis.call('XADD', KEYS[3], '*', unpack(ARGV, 6))
else
  redis.call('XADD', KEYS[3], '*', 'entry', ARGV[2])
end
redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[2], ARGV[2])
redis.call('HDEL', KEYS[4], ARGV[2], ARGV[2] .. ':t', ARGV[2] .. ':hung')
return {1, released}
