-- finish_write_cache: phase 2 of a write. The session's successful locations become serving
-- (and count toward usage); failed ones are removed and queued for physical deletion.
--
-- KEYS[1] blocks    hash key -> block record
-- KEYS[2] session   string: the session record (see start_write_cache.lua)
-- KEYS[3] sessions  zset session id -> deadline
-- KEYS[4] usage     hash b<storage>/n<storage> -> serving bytes/blocks
-- KEYS[5] lru       zset leaf -> last access ms
-- KEYS[6] lfu       zset leaf -> access count
-- KEYS[7] itouch    zset interior block -> last access ms
-- KEYS[8] del       stream of locations to delete physically
-- ARGV[1] session id
-- ARGV[2] success_blocks over the session's locations: "o<k>" (the first k succeeded) or
--         "b<flags>" with one '1'/'0' per location
-- ARGV[3] optional "expire": the worker's expirer failing a session past its deadline (every
--         location fails; a session not yet past its deadline, or already finished, is left
--         alone, reply {1, -1})
--
-- Reply: {1, successes} | {5, message} (unknown, finished or expired session; mask of the wrong
--        length) — nothing changes on an error; an expired session is left to the expirer.
--        Finishing a finished session again with the same mask (a client's retry) answers what
--        the first finish answered, for FINISHED_TTL_MS after it.
-- Example: session 7 wrote B, C; ARGV[2] = "b10" -> B serving (usage +bytes, B a leaf, its
--          parent no longer one), C's location removed and queued on `del`; reply {1, 1}.
--          With "o2" instead (both written, the common case) the fast path below applies: B
--          serving with one child, C serving and the new leaf, B's parent one child more.
--          A location removed (state D) or trimmed (gone) during the write is queued for
--          deletion here, once the engine is done writing it.
if #KEYS ~= 8 or (#ARGV ~= 2 and #ARGV ~= 3) then return redis.error_reply('finish_write_cache: expected 8 keys, 2-3 args') end
local expire = ARGV[3] == 'expire'
local sess = redis.call('GET', KEYS[2])
-- A finished session leaves a marker (11 bytes: 'F', successes u32, a tag of the mask it was
-- finished with; a session record is at least 12 bytes) for FINISHED_TTL_MS, so that a finish
-- the client resends after a dropped connection gets the first run's answer instead of
-- "unknown session". A finish with another mask is refused.
local function mask_tag(m) return redis.sha1hex(m):sub(1, 6) end
if sess and #sess == 11 and sess:sub(1, 1) == 'F' then
  if expire then
    -- Finished just before the expirer got to it: nothing to expire (not counted as expired).
    redis.call('ZREM', KEYS[3], ARGV[1])
    return {1, -1}
  end
  if sess:sub(6) == mask_tag(ARGV[2]) then return {1, (struct.unpack('<I4', sess, 2))} end
  return {5, "write session '" .. ARGV[1] .. "' is already finished (with other success_blocks)"}
end
if not sess then
  if expire then
    redis.call('ZREM', KEYS[3], ARGV[1])
    return {1, 0}
  end
  return {5, "write session '" .. ARGV[1] .. "' is unknown, already finished or already expired"}
end
local seq, deadline, n = struct.unpack('<I4I4I4', sess)
local now = now_ms()
if expire then
  if now < deadline * 1000 then return {1, -1} end
  ARGV[2] = 'o0'
elseif now >= deadline * 1000 then
  return {5, "write session '" .. ARGV[1] .. "' expired at unix time " .. deadline ..
             "; its blocks were not stored (start a new write)"}
end
-- Which locations succeeded: the first `upto`, or those whose mask byte is '1'.
local mask, upto = ARGV[2], nil
if mask:sub(1, 1) == 'o' then
  upto = tonumber(mask:sub(2))
  if not upto or upto < 0 or upto > n then
    return {5, 'success_blocks.offset ' .. mask:sub(2) .. ' is outside 0..=' .. n .. ' (the session has ' .. n .. ' locations)'}
  end
elseif mask:sub(1, 1) == 'b' then
  if #mask - 1 ~= n then
    return {5, 'success_blocks.bool_masks has ' .. (#mask - 1) .. ' values; the session has ' .. n ..
               ' locations (success_blocks indexes the locations startWriteCache returned)'}
  end
else
  return redis.error_reply('finish_write_cache: ARGV[2] must start with o or b')
end

local K = {blocks = KEYS[1], usage = KEYS[4], lru = KEYS[5], lfu = KEYS[6], itouch = KEYS[7], del = KEYS[8]}
-- Per session location j (arrays, not tables keyed by block: this runs for every write, and
-- each table a script fills costs Valkey's allocator and Lua's collector):
--   skey[j]  its block key;
--   recs[j]  the block's record as this script leaves it (false = absent), read in a few HMGETs;
--   state[j] nil = untouched, 1 = changed, 2 = started serving here (changed too).
-- A parent outside the session is read when a child links to it; `outer` holds its changed
-- record.
local skey, recs = {}, {}
for j = 1, n do skey[j] = session_key(sess, j) end
if n > 0 then recs = redis.call('HMGET', K.blocks, unpack(skey, 1, math.min(1000, n))) end
for c = 1001, n, 1000 do
  local part = redis.call('HMGET', K.blocks, unpack(skey, c, math.min(c + 999, n)))
  for i = 1, #part do recs[c + i - 1] = part[i] end
end
local state, outer, at = {}, {}, nil
-- The session index of a block key, or nil; the map is built the first time a parent is not
-- simply the key before its child.
local function index_of(key)
  if not at then
    at = {}
    for j = 1, n do at[skey[j]] = j end
  end
  return at[key]
end
-- `parent` (record `prec`, false if it has none) gains a serving child: its count, the shared
-- bit at its second, and it leaves the leaf indexes if it was a leaf (a block that started
-- serving in this session, `was_fresh`, is not indexed yet). Returns its new record.
local function add_child(parent, prec, was_fresh)
  -- A parent without a record gets a header-only one, so that when it is written again it is
  -- not mistaken for a leaf while this child serves.
  if not prec then prec = rec_new(nil) end
  local c = rec_children(prec)
  -- Saturates: a block with 65535 serving children stays interior for good (never evicted
  -- before them), rather than wrapping to 0.
  if c < 65535 then c = c + 1 end
  prec = rec_set_children(prec, c)
  -- A second serving child: the parent is a prefix requests branch from (its `adaptive` class).
  if c == 2 and not rec_shared(prec) then prec = string.char(prec:byte(1) + 2) .. prec:sub(2) end
  if c == 1 and not was_fresh then
    redis.call('ZREM', K.lru, parent)
    redis.call('ZREM', K.lfu, parent)
  end
  return prec
end

-- The common case, decided in one pass before any change: every location succeeded, each
-- block's record is its one location (this session's, writing) with no serving child, and the
-- blocks chain in session order (block j's parent is block j - 1; block 1's, if any, outside the
-- session). Then block j < n gains exactly one child (j + 1: no second, so no shared bit),
-- block n is the one new leaf, and block 1's parent gains one from outside its own children:
-- what the general path below does, without its per-block bookkeeping. Anything else (a failed
-- or removed location, a record kept for its children, links out of order) takes that path.
if upto == n and n > 0 then
  local slocs, fast = {}, true
  for j = 1, n do
    local rec, sloc = recs[j], session_loc(sess, j)
    slocs[j] = sloc
    if not rec or #rec ~= HDR + #sloc or rec:byte(10) ~= 0 or rec:byte(11) ~= 0 or rec:sub(HDR + 1) ~= sloc
      or (j > 1 and (rec:byte(1) % 2 ~= 1 or rec:sub(2, 9) ~= skey[j - 1])) then
      fast = false
      break
    end
  end
  local parent = fast and rec_parent(recs[1])
  if parent == skey[1] then parent = nil end -- a block naming itself has no parent (as in `served`)
  if parent and index_of(parent) then fast = false end
  if fast then
    local sets, serving, bytes = {}, {}, 0
    for j = 1, n do
      local sloc = slocs[j]
      local sv = serving[sloc]
      if not sv then
        sv = 'S' .. sloc:sub(2)
        serving[sloc] = sv
      end
      sets[2 * j - 1] = skey[j]
      sets[2 * j] = recs[j]:sub(1, 9) .. (j < n and '\1\0' or '\0\0') .. sv
      bytes = bytes + session_bytes(sess, j)
    end
    if parent then
      sets[#sets + 1] = parent
      sets[#sets + 1] = add_child(parent, redis.call('HGET', K.blocks, parent), false)
    end
    for c = 1, #sets, 1000 do redis.call('HSET', K.blocks, unpack(sets, c, math.min(c + 999, #sets))) end
    -- A session's locations are all on one storage (start_write_cache.lua's ARGV[3]).
    usage_add(K, loc_storage(slocs[1], 1), bytes, n)
    local clock = tonumber(redis.call('HGET', K.usage, 'lfu_clock') or '0')
    redis.call('ZADD', K.lru, now, skey[n])
    redis.call('ZADD', K.lfu, 'NX', clock + 1, skey[n])
    redis.call('SET', KEYS[2], 'F' .. struct.pack('<I4', n) .. mask_tag(ARGV[2]), 'PX', FINISHED_TTL_MS)
    redis.call('ZREM', KEYS[3], ARGV[1])
    return {1, n}
  end
end

local done, used = 0, {}
-- The serving form of each distinct location of the session, and its storage id, built once
-- (an unpacked session's locations of one spec group are all alike).
local serving, serving_sid = {}, {}
-- Location j succeeded and its block serves with record `rec`: counted in usage, and counted in
-- its parent, which stops being a leaf (leaves are indexed once all links are made).
local function served(j, rec, sid)
  recs[j] = rec
  state[j] = 2
  local bytes = session_bytes(sess, j)
  local u = used[sid]
  if u then
    u[1], u[2] = u[1] + bytes, u[2] + 1
  else
    used[sid] = {bytes, 1}
  end
  done = done + 1
  local parent = rec_parent(rec)
  if not parent or parent == skey[j] then return end
  local pj
  if j > 1 and parent == skey[j - 1] then pj = j - 1 else pj = index_of(parent) end
  if pj then
    recs[pj] = add_child(parent, recs[pj], state[pj] == 2)
    state[pj] = state[pj] or 1
  else
    local prec = outer[parent]
    if prec == nil then prec = redis.call('HGET', K.blocks, parent) end
    outer[parent] = add_child(parent, prec, false)
  end
end
for j = 1, n do
  local key, sloc = skey[j], session_loc(sess, j)
  local ok
  if upto then ok = j <= upto else ok = mask:byte(j + 1) == 49 end -- '1'
  local rec = recs[j]
  local found = false
  if rec and ok and #rec == HDR + #sloc and rec:sub(HDR + 1) == sloc then
    -- The common case, decided without walking the record: the block's one location is this
    -- session's, still writing, and succeeded (what the general path below does for it).
    found = true
    local sv = serving[sloc]
    if not sv then
      sv = 'S' .. sloc:sub(2)
      serving[sloc] = sv
      serving_sid[sloc] = loc_storage(sv, 1)
    end
    served(j, rec:sub(1, HDR) .. sv, serving_sid[sloc])
  elseif rec then
    for _, p in ipairs(locs(rec)) do
      if loc_seq(rec, p) == seq and loc_storage(rec, p) == loc_storage(sloc, 1) then
        found = true
        local st = loc_state(rec, p)
        if st == 'W' and ok then
          served(j, set_state(rec, p, 'S'), loc_storage(rec, p))
        elseif st == 'W' then
          queue_delete(K, key, loc_bytes(rec, p), 'write_failed')
          rec = remove_loc(rec, p)
          if #rec == HDR and rec_children(rec) == 0 then rec = false end
          recs[j] = rec
          state[j] = 1
        elseif st == 'D' then
          -- Removed while the engine was writing: its file is complete only now.
          queue_delete(K, key, loc_bytes(rec, p), 'removed_while_writing')
        end
        break
      end
    end
  end
  if not found then
    -- Trimmed while the engine was writing: the metadata is gone, the file may not be.
    queue_delete(K, key, sloc, 'trimmed_while_writing')
  end
end
-- Write back the changed records: one HSET (and one HDEL) per 500 records.
local sets, dels = {}, {}
for j = 1, n do
  if state[j] then
    if recs[j] then
      sets[#sets + 1] = skey[j]
      sets[#sets + 1] = recs[j]
    else
      dels[#dels + 1] = skey[j]
    end
  end
end
for key, rec in pairs(outer) do
  sets[#sets + 1] = key
  sets[#sets + 1] = rec
end
for c = 1, #sets, 1000 do redis.call('HSET', K.blocks, unpack(sets, c, math.min(c + 999, #sets))) end
for c = 1, #dels, 1000 do redis.call('HDEL', K.blocks, unpack(dels, c, math.min(c + 999, #dels))) end
for sid, u in pairs(used) do usage_add(K, sid, u[1], u[2]) end
-- Index the blocks that started serving and are leaves once every link is made: a chain written
-- in one session costs one index entry, not one per block added then removed.
local clock = nil
for j = 1, n do
  local rec = recs[j]
  if state[j] == 2 and rec_children(rec) == 0 and has_state(rec, 'S') then
    clock = clock or tonumber(redis.call('HGET', K.usage, 'lfu_clock') or '0')
    redis.call('ZADD', K.lru, now, skey[j])
    redis.call('ZADD', K.lfu, 'NX', clock + 1, skey[j])
  end
end
if expire then
  redis.call('DEL', KEYS[2])
else
  redis.call('SET', KEYS[2], 'F' .. struct.pack('<I4', done) .. mask_tag(ARGV[2]), 'PX', FINISHED_TTL_MS)
end
redis.call('ZREM', KEYS[3], ARGV[1])
return {1, done}
