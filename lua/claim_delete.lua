-- claim_delete: the deleter's step before unlinking an unpacked block's file. The file's path
-- is a function of the key, so a key written again after its old location was queued for
-- deletion reuses the path: this script decides, atomically, whether the file still belongs
-- to the deletion, and if so marks the location 'X' so that no new write of the key can start
-- until `release_block` runs after the unlink.
--
-- KEYS[1] blocks  hash key -> block record
-- KEYS[2] del     the deletion stream
-- ARGV[1] entry id
-- ARGV[2] block key (8 bytes)
-- ARGV[3] location bytes as queued (14 bytes: unpacked)
--
-- Reply: {1, "unlink"} (delete the file now) | {1, "keep"} (a newer write of the key on the same
--        storage owns the path: do not unlink, just release) | {1, "gone"} (the entry was
--        already completed); a bad argument (a bug) is an error reply
-- Example: K has [D seq 3] -> K has [X seq 3], {1, "unlink"}. K has [D seq 3, S seq 9] on the
--          same storage -> {1, "keep"}. K has no record (trimmed) -> K = [X copy], {1, "unlink"}.
if #KEYS ~= 2 or #ARGV ~= 3 then return redis.error_reply('claim_delete: expected 2 keys, 3 args') end
local key, want = ARGV[2], ARGV[3]
if #key ~= 8 or #want ~= 14 then return redis.error_reply('claim_delete: bad key or location') end
if #redis.call('XRANGE', KEYS[2], ARGV[1], ARGV[1]) == 0 then return {1, 'gone'} end
local storage = loc_storage(want, 1)
local rec = redis.call('HGET', KEYS[1], key)
if rec then
  for _, p in ipairs(locs(rec)) do
    local st = loc_state(rec, p)
    if (st == 'W' or st == 'S') and loc_storage(rec, p) == storage then return {1, 'keep'} end
  end
  for _, p in ipairs(locs(rec)) do
    local st = loc_state(rec, p)
    if (st == 'D' or st == 'X') and loc_bytes(rec, p):sub(2) == want:sub(2) then
      redis.call('HSET', KEYS[1], key, set_state(rec, p, 'X'))
      return {1, 'unlink'}
    end
  end
else
  rec = rec_new(nil)
end
-- The location's metadata is gone (trimmed): hold the key with a copy while unlinking.
redis.call('HSET', KEYS[1], key, rec .. 'X' .. want:sub(2))
return {1, 'unlink'}
