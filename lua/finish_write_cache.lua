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
local mask, ok = ARGV[2], {}
if mask:sub(1, 1) == 'o' then
  local k = tonumber(mask:sub(2))
  if not k or k < 0 or k > n then
    return {5, 'success_blocks.offset ' .. mask:sub(2) .. ' is outside 0..=' .. n .. ' (the session has ' .. n .. ' locations)'}
  end
  for j = 1, n do ok[j] = j <= k end
elseif mask:sub(1, 1) == 'b' then
  if #mask - 1 ~= n then
    return {5, 'success_blocks.bool_masks has ' .. (#mask - 1) .. ' values; the session has ' .. n ..
               ' locations (success_blocks indexes the locations startWriteCache returned)'}
  end
  for j = 1, n do ok[j] = mask:sub(j + 1, j + 1) == '1' end
else
  return redis.error_reply('finish_write_cache: ARGV[2] must start with o or b')
end

local K = {blocks = KEYS[1], usage = KEYS[4], lru = KEYS[5], lfu = KEYS[6], itouch = KEYS[7], del = KEYS[8]}
local done = 0
local fresh, order, used, cache, dirty = {}, {}, {}, {}, {}
-- Every record of the session in a few HMGETs (false = absent), not one call per key.
for c = 1, n, 1000 do
  local ks = {}
  for j = c, math.min(c + 999, n) do ks[#ks + 1] = (session_loc(sess, j)) end
  local part = redis.call('HMGET', K.blocks, unpack(ks))
  for i = 1, #ks do
    if cache[ks[i]] == nil then cache[ks[i]] = part[i] end
  end
end
-- The serving form of each distinct location of the session, built once (an unpacked session's
-- locations of one spec group are all alike).
local serving = {}
-- A location of the session succeeded: the block serves (counted in usage, linked to its
-- parent, indexed as a leaf once all links are made).
local function served(key, rec, bytes, sid)
  cache[key] = rec
  dirty[key] = rec
  local u = used[sid] or {0, 0}
  used[sid] = {u[1] + bytes, u[2] + 1}
  link_parent(K, key, rec, fresh, cache, dirty)
  fresh[key] = true
  order[#order + 1] = key
  done = done + 1
end
for j = 1, n do
  local key, bytes, sloc = session_loc(sess, j)
  local rec = cache[key]
  local found = false
  if rec and ok[j] and #rec == HDR + #sloc and rec:sub(HDR + 1) == sloc then
    -- The common case, decided without walking the record: the block's one location is this
    -- session's, still writing, and succeeded (what the general path below does for it).
    found = true
    local sv = serving[sloc]
    if not sv then
      sv = 'S' .. sloc:sub(2)
      serving[sloc] = sv
    end
    served(key, rec:sub(1, HDR) .. sv, bytes, loc_storage(sv, 1))
  elseif rec then
    for _, p in ipairs(locs(rec)) do
      if loc_seq(rec, p) == seq and loc_storage(rec, p) == loc_storage(sloc, 1) then
        found = true
        local st = loc_state(rec, p)
        if st == 'W' and ok[j] then
          served(key, set_state(rec, p, 'S'), bytes, loc_storage(rec, p))
        elseif st == 'W' then
          queue_delete(K, key, loc_bytes(rec, p), 'write_failed')
          rec = remove_loc(rec, p)
          if #rec == HDR and rec_children(rec) == 0 then
            cache[key] = false
            dirty[key] = false
          else
            cache[key] = rec
            dirty[key] = rec
          end
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
flush_records(K, dirty)
for sid, u in pairs(used) do usage_add(K, sid, u[1], u[2]) end
index_leaves(K, order, cache, now)
if expire then
  redis.call('DEL', KEYS[2])
else
  redis.call('SET', KEYS[2], 'F' .. struct.pack('<I4', done) .. mask_tag(ARGV[2]), 'PX', FINISHED_TTL_MS)
end
redis.call('ZREM', KEYS[3], ARGV[1])
return {1, done}
