-- start_write_cache: phase 1 of a write. Atomically finds which keys are present (a location in
-- any state but deleting) and creates one `writing` location for every other key, owned by a
-- new write session that must be finished before its deadline.
--
-- KEYS[1] blocks    hash key(8 bytes) -> block record (lib/record.lua)
-- KEYS[2] session   string: the new session's record (must not exist)
-- KEYS[3] sessions  zset session id -> deadline (unix s), for the expirer
-- KEYS[4] seq       string counter of session numbers
-- KEYS[5] files     hash packed file id (first key .. member hash) -> blocks written into it
-- KEYS[6] ighost    (only in groups that reclaim by `adaptive`) zset of evicted shared blocks
--                   (lua/evict.lua): each new record is classed (lib/record.lua) — long write
--                   from the LONG_RUN-th key of a run of new keys on, shared when the ghost
--                   remembers the key (its entry is then dropped)
-- ARGV[1] session id (the member of `sessions`)
-- ARGV[2] timeout, seconds (> 0)
-- ARGV[3] storage id (1..65535) for the new locations
-- ARGV[4] key_count_per_file (>= 1): new blocks are packed this many to a file
-- ARGV[5] spec groups: "" (every block has every spec) or one byte per key (0 = every spec,
--         k = location_spec_groups[k-1])
-- ARGV[6] bytes per spec group, comma separated, index 0 = every spec ("8192,4096")
-- ARGV[7..] block keys, 8 bytes each, in request order; key i's parent is key i-1
--
-- Reply: {1, present, loc1, loc2, ...}: `present` has one '1'/'0' per key; loc j is the new
--        location bytes of the j-th non-present key. When the keys are distinct, a stored
--        prefix chained in request order (possibly empty) is followed only by keys without a
--        record, ARGV[5] is empty and blocks are not packed, every new location is the same
--        bytes, and the reply carries it once: {1, present, loc} (for one new key or for all).
--        | {-3, message} (the session id is another request's: the caller draws another id and
--        calls again; never a wire status). Arguments kvcm itself got wrong are an error reply
--        (a bug, never a status).
-- Session record: seq u32 | deadline u32 | count u32 | count x (key 8 bytes | bytes u32 |
-- location 26 bytes, zero-padded), so finish and expiry can queue a location's deletion even
-- when a trim or removal took its metadata while the engine was writing.
-- A packed file is named after its first block and a hash of its members and the session, so a
-- rewrite of the same blocks never reuses a file that is still queued for deletion.
-- Example: blocks = {A: serving}; keys = {A, B, C}, K = 1
--   -> blocks = {A: serving, B: W seq 7, C: W seq 7}, reply {1, "100", locB, locC};
--   a second writer of {A, B} now gets {1, "11"} and no locations.
local nk = #ARGV - 6
if (#KEYS ~= 5 and #KEYS ~= 6) or nk < 1 then
  return redis.error_reply('start_write_cache: expected 5 or 6 keys and >= 7 args')
end
-- The `adaptive` policy's long-write class starts at this key of a run of new keys
-- (optimizer/src/policy/adaptive.rs, LONG_RUN).
local LONG_RUN = 16
local ghost = KEYS[6]
local timeout, storage, per_file = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local groups = ARGV[5]
if not timeout or timeout <= 0 then return redis.error_reply('start_write_cache: write timeout must be positive') end
if not storage or storage < 1 or storage > 65535 then return redis.error_reply('start_write_cache: bad storage id') end
if not per_file or per_file < 1 or per_file > 65534 then return redis.error_reply('start_write_cache: bad key_count_per_file') end
if groups ~= '' and #groups ~= nk then return redis.error_reply('start_write_cache: spec groups must have one byte per key') end
local sizes = {}
for s in string.gmatch(ARGV[6], '[^,]+') do sizes[#sizes + 1] = tonumber(s) end
for i = 1, nk do
  local k = ARGV[6 + i]
  if #k ~= 8 then return redis.error_reply('start_write_cache: block key ' .. i .. ' is not 8 bytes') end
  local g = 0
  if groups ~= '' then g = groups:byte(i) end
  if not sizes[g + 1] then return redis.error_reply('start_write_cache: no size for spec group ' .. g) end
end
local prior = redis.call('GET', KEYS[2])
if prior then
  -- The session id is the frontend's random id for one request: an existing session with it is
  -- this very request, resent by the client after a dropped connection (the first run went
  -- through). Answer what the first run answered, from the session record: its new keys, in
  -- request order, are the keys that were not present.
  if #prior < 12 then return {-3, 'session id taken by another request'} end
  local n = (select(3, struct.unpack('<I4I4I4', prior)))
  local present, again, j = {}, {1, ''}, 1
  for i = 1, nk do
    local k = ARGV[6 + i]
    if j <= n and session_key(prior, j) == k then
      again[#again + 1] = session_loc(prior, j)
      present[i] = '0'
      j = j + 1
    else
      present[i] = '1'
    end
  end
  if j <= n then return {-3, 'session id taken by another request'} end
  again[2] = table.concat(present)
  return again
end

local now = tonumber(redis.call('TIME')[1])
-- Every record in a few HMGETs (chunks stay under Lua's unpack limit), not one call per key.
local recs = redis.call('HMGET', KEYS[1], unpack(ARGV, 7, 6 + math.min(1000, nk)))
for c = 1001, nk, 1000 do
  local part = redis.call('HMGET', KEYS[1], unpack(ARGV, 6 + c, 6 + math.min(c + 999, nk)))
  for j = 1, #part do recs[c + j - 1] = part[j] end
end
-- The common case, a request as a connector sends it: distinct keys, a leading run of `m`
-- (0 or more) that the cache already holds — each record live and chained in request order from
-- a first key without a parent — then keys without a record, its new suffix. Every new record
-- links to the key before it, and no link can close a cycle (each new key's chain runs up
-- through the request to a root). Then `new` stays nil (the j-th new key is key m + j) and the
-- walk below is skipped.
local seen, simple, m = {}, true, 0
for i = 1, nk do
  local k = ARGV[6 + i]
  local rec = recs[i]
  if rec then
    -- A key of the stored run. It needs no `seen` entry: a run chained in request order from a
    -- root cannot hold a key twice (the second would need two different parents), and a key
    -- without a record cannot be one of its keys.
    if i ~= m + 1 or not has_live(rec) or rec_parent(rec) ~= (i > 1 and ARGV[5 + i] or nil) then
      simple = false
      break
    end
    m = i
  elseif seen[k] then
    simple = false
    break
  else
    seen[k] = true
  end
end
local present, new
if simple then
  present = string.rep('1', m) .. string.rep('0', nk - m)
else
  m = 0
  local flags = {}
  seen, new = {}, {}
  for i = 1, nk do
    local k = ARGV[6 + i]
    local p = false
    if seen[k] then
      p = true
    else
      seen[k] = true
      local rec = recs[i]
      if rec and has_live(rec) then p = true end
    end
    flags[i] = p and '1' or '0'
    if not p then new[#new + 1] = i end
  end
  present = table.concat(flags)
end
local nnew = new and #new or nk - m

-- A key without a record gets a new record naming the previous key as its parent. Records whose
-- key was dropped while a child was being written still name it, and key orders are the
-- engine's, so that new link could close a cycle (write [A]; [A, B]; [B, C]; fail the first
-- session; write [C, A]: A -> C -> B -> A). No block of a cycle ever becomes a leaf, so none could
-- be evicted. A link closes a cycle only if the chain above the previous key comes back to the
-- run of linked keys it starts; `unlinked[i]` keeps key i a chain root of its own instead.
-- Chains that stay in request order (every key's parent the key before it, the common case) are
-- known safe in one pass; only a chain that leaves the request is walked, WALK_STEPS records at
-- most for the whole request (a bounded cost whatever the request). A walk cut short does not
-- make its link (a missing parent link costs eviction order, never a wrong answer); a request
-- whose chain leaves it to a stored chain deeper than the budget pays that.
local unlinked = {}
if not simple then
  local WALK_STEPS = 2048
  local steps = 0
  local linked = {} -- key -> index, for keys that get a new record (and so a new parent link)
  for _, i in ipairs(new) do
    if not recs[i] then linked[ARGV[6 + i]] = i end
  end
  -- The parent of key i as it will be (a new link, or its record's), and whether that is key i - 1.
  local function parent_at(i)
    local k = ARGV[6 + i]
    if linked[k] == i then
      if i > 1 and not unlinked[i] then return ARGV[5 + i], true end
      return nil, false
    end
    local rec = recs[i]
    if not rec then return nil, false end
    local p = rec_parent(rec)
    return p, (i > 1 and p == ARGV[5 + i])
  end
  -- in_order[i]: the chain above key i stays in request order down to its root.
  local in_order = {}
  for i = 1, nk do
    local first = linked[ARGV[6 + i]]
    if first and first < i then
      in_order[i] = in_order[first] -- a repeated key: its chain is its first occurrence's
    else
      local p, prev = parent_at(i)
      in_order[i] = (p == nil) or (prev and in_order[i - 1])
    end
  end
  for _, s in ipairs(new) do
    if s > 1 and linked[ARGV[6 + s]] == s and linked[ARGV[5 + s]] ~= s - 1 and not in_order[s - 1] then
      -- s starts a run of linked keys s..e; walk up from key s - 1.
      local e = s
      while e < nk and linked[ARGV[7 + e]] == e + 1 do e = e + 1 end
      local idx, key, cycle = s - 1, ARGV[5 + s], false
      while key do
        steps = steps + 1
        if steps > WALK_STEPS then cycle = true break end -- cut short: not linked, to be safe
        local at = linked[key] or idx
        if at then
          if at >= s and at <= e then cycle = true break end
          if in_order[at] then
            -- In request order down to a root: never through the run, whose keys are not in
            -- order (the key before it is not).
            break
          end
          local p, prev = parent_at(at)
          key, idx = p, (prev and at - 1 or nil)
        else
          local rec = redis.call('HGET', KEYS[1], key)
          key, idx = rec and rec_parent(rec), nil
        end
      end
      if cycle then unlinked[s] = true end
    end
  end
end

local seq = redis.call('INCR', KEYS[4]) % 4294967296
local deadline = now + timeout
local head = struct.pack('<I4I4I4', seq, deadline, nnew)
-- All new keys of one spec group, unpacked: every new location is the same bytes, and the reply
-- carries it once (one location in a reply stands for every new key's).
local uniform = simple and nnew > 0 and groups == '' and per_file == 1
local reply = {1, present}
local sess = {head}
local writes, nw, ns, nr = {}, 0, 1, 2
-- What every new location of a spec group shares (state, storage, group, session, time), built
-- once per group rather than per block. An unpacked location is the same for every block of its
-- spec group; so is the tail of its session entry.
local stem, unpacked, entry_tail, packed_size = {}, {}, {}, {}
local function group_parts(g)
  stem[g] = 'W' .. struct.pack('<I2', storage) .. string.char(g) .. struct.pack('<I4I4', seq, now)
  unpacked[g] = stem[g] .. struct.pack('<I2', NOT_PACKED)
  packed_size[g] = struct.pack('<I4', sizes[g + 1])
  entry_tail[g] = packed_size[g] .. unpacked[g] .. string.rep('\0', 26 - #unpacked[g])
end
local f = 0
local run, last_new = 0, -1
-- Which new keys the ghost remembers (`adaptive` only): one ZMSCORE per 1,000 keys, and one
-- ZREM of those found, rather than a call per key.
local remembered, forget = {}, {}
if ghost and nnew > 0 then
  local nkeys = {}
  for j = 1, nnew do nkeys[j] = ARGV[6 + (new and new[j] or m + j)] end
  for c = 1, nnew, 1000 do
    local part = redis.call('ZMSCORE', ghost, unpack(nkeys, c, math.min(c + 999, nnew)))
    for j = 1, #part do
      if part[j] then
        remembered[c + j - 1] = true
        forget[#forget + 1] = nkeys[c + j - 1]
      end
    end
  end
  for c = 1, #forget, 1000 do redis.call('ZREM', ghost, unpack(forget, c, math.min(c + 999, #forget))) end
end
while f * per_file < nnew do
  local first, last = f * per_file + 1, math.min((f + 1) * per_file, nnew)
  local file_tail = nil
  if per_file > 1 then
    local members = {}
    for j = first, last do members[#members + 1] = ARGV[6 + (new and new[j] or m + j)] end
    local file_hash = tonumber(redis.sha1hex(table.concat(members) .. struct.pack('<I4', seq)):sub(1, 8), 16)
    file_tail = members[1] .. struct.pack('<I4', file_hash)
    redis.call('HSET', KEYS[5], file_tail, last - first + 1)
  end
  for j = first, last do
    local i = new and new[j] or m + j
    local k = ARGV[6 + i]
    local g = 0
    if groups ~= '' then g = groups:byte(i) end
    if not stem[g] then group_parts(g) end
    -- The session entry goes in as its parts (table.concat joins them once, at the end; a
    -- uniform session's entries are its keys, each followed by the same tail).
    local loc
    if per_file > 1 then
      loc = stem[g] .. struct.pack('<I2', j - first) .. file_tail
      sess[ns + 1], sess[ns + 2], sess[ns + 3] = k, packed_size[g], loc
      ns = ns + 3
    else
      loc = unpacked[g]
      if not uniform then
        sess[ns + 1], sess[ns + 2] = k, entry_tail[g]
        ns = ns + 2
      end
    end
    local rec = recs[i]
    if rec then
      rec = rec .. loc
    elseif i > 1 and not unlinked[i] then
      rec = rec_new(ARGV[5 + i], loc)
    else
      rec = rec_new(nil, loc)
    end
    if ghost then
      -- Classes for `adaptive`: a run of new keys goes on while each is the key after the last.
      if last_new == i - 1 and not unlinked[i] then run = run + 1 else run = 1 end
      last_new = i
      local bits = (run >= LONG_RUN) and 4 or 0
      -- Shared if the ghost remembers it, or if it still has two serving children (a record
      -- kept to count them; finish_write_cache.lua set the bit when the second one served).
      if remembered[j] or (rec_shared(rec) and rec_children(rec) >= 2) then bits = bits + 2 end
      rec = rec_set_class(rec, bits)
    end
    writes[nw + 1], writes[nw + 2] = k, rec
    nw = nw + 2
    if not uniform then
      nr = nr + 1
      reply[nr] = loc
    end
  end
  f = f + 1
end
for c = 1, #writes, 1000 do
  redis.call('HSET', KEYS[1], unpack(writes, c, math.min(c + 999, #writes)))
end
if uniform then
  reply[3] = unpacked[0]
  redis.call('SET', KEYS[2], head .. table.concat(ARGV, entry_tail[0], 7 + m, 6 + nk) .. entry_tail[0])
else
  redis.call('SET', KEYS[2], table.concat(sess))
end
redis.call('ZADD', KEYS[3], deadline, ARGV[1])
return reply
