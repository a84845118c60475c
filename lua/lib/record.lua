-- lib/record.lua: helpers shared by the data-plane scripts. core/src/scripts.rs puts this file
-- before each of them (Valkey scripts cannot import), so every script sees the same layout; it
-- leaves out the functions a script never calls (each is a closure built on every call). A
-- function starts with `local function NAME(` at the start of a line, its comment right above
-- it, and ends on that line (` end`) or at the next line that is exactly `end`.
--
-- Block record (the value of one field of the instance's `blocks` hash; the field is the block
-- key as 8 big-endian bytes):
--   flags u8 (bit 0: has parent) | parent 8 bytes | children u16 LE | location*
-- `children` counts the block's children that are serving; a serving block with none is a leaf.
-- Location (14 bytes, or 26 when its block is packed into a shared file):
--   state 1 byte ('W' writing, 'S' serving, 'D' deleting, 'X' deleting and its file being
--   unlinked right now: the key cannot be written again until the deleter releases it)
--   | storage id u16 LE | spec group u8
--   (0 = every spec, k = location_spec_groups[k-1]) | session seq u32 LE | written unix s u32 LE
--   | blkid u16 LE (65535 = not packed) | [file first key 8 bytes | file member hash u32 LE]
-- Eviction indexes: `lru` (leaf -> last access ms), `lfu` (leaf -> access count), `itouch`
-- (interior block -> last access ms as the deepest block of a read).
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

-- K: {blocks, usage, lru, lfu, itouch, del} key names.
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
  redis.call('ZREM', K.lru, key)
  redis.call('ZREM', K.lfu, key)
  redis.call('ZREM', K.itouch, key)
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
  if c == 0 and has_state(prec, 'S') then
    local own = tonumber(redis.call('ZSCORE', K.itouch, parent) or '0')
    if own > score then score = own end
    redis.call('ZADD', K.lru, score, parent)
    redis.call('ZADD', K.lfu, 'NX', freq, parent)
    redis.call('ZREM', K.itouch, parent)
  end
end

-- Whether a record holds a location a new write must not shadow (writing, serving, or being
-- unlinked).
local function has_live(rec)
  return has_state(rec, 'W') or has_state(rec, 'S') or has_state(rec, 'X')
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
-- `key`'s record in the hash `blocks`, deleting a record left with nothing to hold. Returns 1 if
-- it was there, else 0.
local function drop_deleting(blocks, key, want)
  local rec = redis.call('HGET', blocks, key)
  if not rec then return 0 end
  for _, p in ipairs(locs(rec)) do
    local st = loc_state(rec, p)
    if (st == 'D' or st == 'X') and loc_bytes(rec, p):sub(2) == want:sub(2) then
      rec = remove_loc(rec, p)
      if #rec == HDR and rec_children(rec) == 0 then
        redis.call('HDEL', blocks, key)
      else
        redis.call('HSET', blocks, key, rec)
      end
      return 1
    end
  end
  return 0
end

-- Queues a location for physical deletion (the deleter removes its metadata afterwards).
local function queue_delete(K, key, loc, reason)
  redis.call('XADD', K.del, '*', 'k', key, 'l', loc, 'r', reason)
end

-- Engine-reported specs (`engine_specs` hash of lua/report_event.lua). The field named by the block key
-- (8 bytes) holds the entries of up to SPEC_INLINE (reporter, medium) pairs holding the block,
--   reporter index u32 | medium id u8 | length u32 | specs (`length` bytes: count u8 |
--   (name length u8 | name | uri length u16 | uri)*)
-- in no particular order; a pair added while that value was full has a field of its own, named
-- block key .. reporter index u32 .. medium id u8, holding its specs alone. Each pair's specs are
-- in exactly one of the two places, found in the block's value first. So a new block's specs are
-- stored under its key as sent, and a read of a block held by many reporters fetches at most
-- SPEC_INLINE entries besides the one it wants. SPEC_HDR is the entry header's size.
local SPEC_HDR = 9
local SPEC_INLINE = 4
-- Position of the entry of (idx, mid) in the specs value `v` (nil or false: none), and the length
-- of its specs; nil when there is none.
local function spec_at(v, idx, mid)
  if not v then return nil end
  local p = 1
  while p <= #v do
    local i, m, len = struct.unpack('<I4BI4', v, p)
    if i == idx and m == mid then return p, len end
    p = p + SPEC_HDR + len
  end
  return nil
end
-- The specs of (idx, mid) in `v`, or nil.
local function spec_get(v, idx, mid)
  local p, len = spec_at(v, idx, mid)
  if p then return v:sub(p + SPEC_HDR, p + SPEC_HDR - 1 + len) end
  return nil
end
-- The number of entries in `v`.
local function spec_count(v)
  local n, p = 0, 1
  while v and p <= #v do
    n = n + 1
    p = p + SPEC_HDR + struct.unpack('<I4', v, p + 5)
  end
  return n
end
-- The field of (idx, mid)'s specs when they are not in the block's value.
local function spec_field(key, idx, mid)
  return key .. struct.pack('<I4B', idx, mid)
end
-- `v` with `entry` (a whole entry, header included) in place of (idx, mid)'s, or appended.
local function spec_put(v, idx, mid, entry)
  local p, len = spec_at(v, idx, mid)
  if not p then return (v or '') .. entry end
  return v:sub(1, p - 1) .. entry .. v:sub(p + SPEC_HDR + len)
end
-- `v` without (idx, mid)'s entry ('' when none is left; nil stays nil).
local function spec_drop(v, idx, mid)
  local p, len = spec_at(v, idx, mid)
  if not p then return v end
  return v:sub(1, p - 1) .. v:sub(p + SPEC_HDR + len)
end
-- One entry: (idx, mid) holding `specs`.
local function spec_entry(idx, mid, specs)
  return struct.pack('<I4BI4', idx, mid, #specs) .. specs
end
