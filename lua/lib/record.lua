-- lib/record.lua: helpers shared by the data-plane scripts. core/src/scripts.rs puts this file
-- before each of them (Valkey scripts cannot import), so every script sees the same layout; it
-- leaves out the functions a script never calls (each is a closure built on every call). A
-- function starts with `local function NAME(` at the start of a line, its comment right above
-- it, and ends on that line (` end`) or at the next line that is exactly `end`.
--
-- Block record (the value of one field of the instance's `blocks` hash; the field is the block
-- key as 8 big-endian bytes):
--   flags u8 (bit 0: has parent; bit 1: shared, bit 2: long write — the classes of the
--   `adaptive` policy, below) | parent 8 bytes | children u16 LE | location*
-- `children` counts the block's children that are serving; a serving block with none is a leaf.
-- *Shared*: the block has had two serving children at once since it was written (a prefix
-- requests branch from), or it was written back while the instance's `ighost` remembered it
-- as an evicted shared block. *Long write*: the block was the LONG_RUN-th key of its write
-- session's run of new keys, or later (a pasted document, a long tool output). Both are set
-- when the block is written (start_write_cache.lua, in groups that reclaim by `adaptive`) and
-- shared also when its second child serves (finish_write_cache.lua, in every group).
-- Location (14 bytes, or 26 when its block is packed into a shared file):
--   state 1 byte ('W' writing, 'S' serving, 'D' deleting, 'X' deleting and its file being
--   unlinked right now: the key cannot be written again until the deleter releases it)
--   | storage id u16 LE | spec group u8
--   (0 = every spec, k = location_spec_groups[k-1]) | session seq u32 LE | written unix s u32 LE
--   | blkid u16 LE (65535 = not packed) | [file first key 8 bytes | file member hash u32 LE]
-- Eviction indexes: `lru` (leaf -> last access ms), `lfu` (leaf -> LFU-DA priority: the aging
-- clock plus one when it was written, or its last child's priority plus its own count when it
-- became a leaf again; plus one per read since), `itouch` (interior block -> last access ms as
-- the deepest block of a read), `icount` (hash, block -> its count, in groups that reclaim by
-- LFU: reads whose deepest block it was, plus the counts of its evicted children — so when a
-- prefix becomes a leaf, its count is every read that went through it, as LFU counts it, though
-- a read touches one block: the read's touch in core/src/store/get_cache_location.rs; dropped
-- when the block is unlinked, and again when the deleter releases a block that no longer
-- serves, in case a read's touch landed after the unlink; one that lands later still, like a
-- late interior touch, is collected by the worker's touch-gc, lua/prune_touch.lua).
-- Usage hash: b<storage id> = serving bytes, n<storage id> = serving blocks, lfu_clock = the
-- LFU aging clock (the score of the last leaf evicted by frequency; new leaves start above it,
-- so old popularity fades as the clock rises: LFU with dynamic aging).
local HDR = 11
local NOT_PACKED = 65535
-- How long a finished write session's marker stays (finish_write_cache.lua): far longer than a
-- client's retries of one request take.
local FINISHED_TTL_MS = 60000

-- A new record: no children, `loc` (optional) its one location.
local function rec_new(parent, loc)
  if parent then return '\1' .. parent .. '\0\0' .. (loc or '') end
  return '\0\0\0\0\0\0\0\0\0\0\0' .. (loc or '')
end
-- The record with its class bits (flags bits 1 and 2) replaced by `bits` (0, 2, 4 or 6).
local function rec_set_class(rec, bits)
  return string.char(rec:byte(1) % 2 + bits) .. rec:sub(2)
end
-- Whether the record's block is shared (flags bit 1).
local function rec_shared(rec)
  return math.floor(rec:byte(1) / 2) % 2 == 1
end
local function rec_parent(rec)
  if rec:byte(1) % 2 == 1 then return rec:sub(2, 9) end
  return nil
end
local function rec_children(rec)
  local lo, hi = rec:byte(10, 11)
  return lo + hi * 256
end
local function rec_set_children(rec, n)
  return rec:sub(1, 9) .. string.char(n % 256, math.floor(n / 256)) .. rec:sub(12)
end
local function loc_len(rec, p)
  if struct.unpack('<I2', rec, p + 12) == NOT_PACKED then return 14 end
  return 26
end
-- Start offsets of every location of a record.
local function locs(rec)
  local out, p = {}, HDR + 1
  while p <= #rec do
    out[#out + 1] = p
    p = p + loc_len(rec, p)
  end
  return out
end
local function loc_state(rec, p) return rec:sub(p, p) end
local function loc_storage(rec, p) return (struct.unpack('<I2', rec, p + 1)) end
local function loc_group(rec, p) return rec:byte(p + 3) end
local function loc_seq(rec, p) return (struct.unpack('<I4', rec, p + 4)) end
local function loc_written(rec, p) return (struct.unpack('<I4', rec, p + 8)) end
local function loc_bytes(rec, p) return rec:sub(p, p + loc_len(rec, p) - 1) end
local function set_state(rec, p, s) return rec:sub(1, p - 1) .. s .. rec:sub(p + 1) end
local function remove_loc(rec, p) return rec:sub(1, p - 1) .. rec:sub(p + loc_len(rec, p)) end
local function has_state(rec, s)
  for _, p in ipairs(locs(rec)) do
    if loc_state(rec, p) == s then return true end
  end
  return false
end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- K: {blocks, usage, lru, lfu, itouch, icount, del} key names (icount: unlink_serving's).
local function usage_add(K, storage, bytes, blocks)
  redis.call('HINCRBY', K.usage, 'b' .. storage, bytes)
  redis.call('HINCRBY', K.usage, 'n' .. storage, blocks)
end

-- A block stopped serving: drop it from the indexes; its parent loses a child and, when that
-- was its last and the parent is serving, becomes a leaf that inherits the newer of the
-- child's recency and its own interior touch.
local function unlink_serving(K, key, rec)
  local score = tonumber(redis.call('ZSCORE', K.lru, key) or redis.call('ZSCORE', K.itouch, key) or '0')
  local freq = tonumber(redis.call('ZSCORE', K.lfu, key) or '1')
  local count = tonumber(redis.call('HGET', K.icount, key) or '0')
  redis.call('ZREM', K.lru, key)
  redis.call('ZREM', K.lfu, key)
  redis.call('ZREM', K.itouch, key)
  if count > 0 then redis.call('HDEL', K.icount, key) end
  local parent = rec_parent(rec)
  if not parent or parent == key then return end
  local prec = redis.call('HGET', K.blocks, parent)
  if not prec then return end
  local c = rec_children(prec)
  if c > 0 and c < 65535 then c = c - 1 end
  if c == 0 and #prec == HDR then
    -- A header kept only to count children: nothing left to count.
    redis.call('HDEL', K.blocks, parent)
    return
  end
  redis.call('HSET', K.blocks, parent, rec_set_children(prec, c))
  if not has_state(prec, 'S') then return end
  if c == 0 then
    local own = tonumber(redis.call('ZSCORE', K.itouch, parent) or '0')
    if own > score then score = own end
    local pcount = tonumber(redis.call('HGET', K.icount, parent) or '0')
    redis.call('ZADD', K.lru, score, parent)
    redis.call('ZADD', K.lfu, 'NX', freq + pcount, parent)
    redis.call('ZREM', K.itouch, parent)
  end
  -- The reads that went through this block went through its parent too.
  if count > 0 then redis.call('HINCRBY', K.icount, parent, count) end
end

-- Whether a record holds a location a new write must not shadow (writing, serving, or being
-- unlinked). Read in place, one pass over the state bytes: a write's start asks this of every
-- present key of a request, so it builds no table of locations.
local function has_live(rec)
  local p = HDR + 1
  while p <= #rec do
    local st = rec:byte(p)
    if st == 87 or st == 83 or st == 88 then return true end -- 'W', 'S', 'X'
    if rec:byte(p + 12) == 255 and rec:byte(p + 13) == 255 then p = p + 14 else p = p + 26 end
  end
  return false
end

-- Whether a record holds a serving location, read in place (the `adaptive` eviction asks it of
-- 32 sampled leaves per victim).
local function has_serving(rec)
  local p = HDR + 1
  while p <= #rec do
    if rec:byte(p) == 83 then return true end -- 'S'
    if rec:byte(p + 12) == 255 and rec:byte(p + 13) == 255 then p = p + 14 else p = p + 26 end
  end
  return false
end

-- The `adaptive` policy's age bucket of an age in ms, as kvcm_core::hit_density::bucket
-- computes it: floor(4 log2(age + 1)), at most 127 (the epsilon keeps exact powers of two in
-- their own bucket).
local function age_bucket(age)
  local b = math.floor(4 * math.log(age + 1) / math.log(2) + 1e-9)
  if b > 127 then return 127 end
  return b
end

-- Session record entries: key (8) | bytes u32 | location (26 bytes, zero-padded when shorter).
local SESSION_HDR, SESSION_ENTRY = 12, 38
local function session_key(sess, j)
  local off = SESSION_HDR + (j - 1) * SESSION_ENTRY + 1
  return sess:sub(off, off + 7)
end
local function session_bytes(sess, j)
  local off = SESSION_HDR + (j - 1) * SESSION_ENTRY + 1
  local b1, b2, b3, b4 = sess:byte(off + 8, off + 11)
  return b1 + b2 * 256 + b3 * 65536 + b4 * 16777216
end
-- Entry j's location, its zero padding dropped (blkid NOT_PACKED, ff ff: a 14-byte location).
local function session_loc(sess, j)
  local off = SESSION_HDR + (j - 1) * SESSION_ENTRY + 1
  if sess:byte(off + 24) == 255 and sess:byte(off + 25) == 255 then return sess:sub(off + 12, off + 25) end
  return sess:sub(off + 12, off + 37)
end

-- Drops a location being deleted ('D' or 'X', matching `want` but for its state byte) from
-- `key`'s record in the hash `blocks`, deleting a record left with nothing to hold, and the
-- key's read count from the hash `icount` unless it serves again (a count a read's touch added
-- after the block was unlinked would otherwise stay for good). Returns 1 if it was there, else 0.
local function drop_deleting(blocks, icount, key, want)
  local rec = redis.call('HGET', blocks, key)
  local dropped = 0
  for _, p in ipairs(rec and locs(rec) or {}) do
    local st = loc_state(rec, p)
    if (st == 'D' or st == 'X') and loc_bytes(rec, p):sub(2) == want:sub(2) then
      rec = remove_loc(rec, p)
      if #rec == HDR and rec_children(rec) == 0 then
        redis.call('HDEL', blocks, key)
      else
        redis.call('HSET', blocks, key, rec)
      end
      dropped = 1
      break
    end
  end
  -- Also where the record is gone already (an entry released twice): a count exists only
  -- while its block serves.
  if not rec or not has_state(rec, 'S') then redis.call('HDEL', icount, key) end
  return dropped
end

-- Queues a location for physical deletion (the deleter removes its metadata afterwards).
local function queue_delete(K, key, loc, reason)
  redis.call('XADD', K.del, '*', 'k', key, 'l', loc, 'r', reason)
end
