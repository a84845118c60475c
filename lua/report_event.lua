-- report_event: one ReportEvent request of one reporter (an engine's own cache tier on one host:
-- `<storage type>|<host_ip_port>`), applied atomically in the instance's slot, so any frontend
-- takes any reporter's events and a frontend restart loses nothing (docs/events.md).
--
-- KEYS[1] reporters  hash reporter id -> reporter record; '#<idx>' -> reporter id; '#seq'
--                    -> the last reporter index handed out
-- KEYS[2] engine     hash block key (8 bytes) -> engine-reported entries (below)
-- ARGV[1] reporter id
-- ARGV[2] cleanup grace, ms: a reporter silent this long is gone (tombstoned) for events
-- ARGV[3] snapshot min interval, ms
-- ARGV[4] a fresh 32-hex version, used if this request starts a generation
-- ARGV[5..] events, one per argument, validated by the caller (core/src/store/report_event.rs):
--   'R' medium '\0' medium ...               NODE_REGISTER
--   'H'                                      HEARTBEAT
--   'X'                                      HOST_DOWN (alone in its request)
--   'A' key(8) tail                          BLOCK_ADD; `tail` is the stored form of the entry
--                                            after its 10-byte header (medium length u8 |
--                                            medium | spec count u8 | specs), below
--   'D' key(8) medium '\0' name '\0' name... BLOCK_DELETE (spec names)
--   'S' count                                BLOCK_SNAPSHOT, its `count` items in the next
--                                            arguments: key(8) tail
--
-- Reporter record: state c1 ('A' active, 'T' unregistered: HOST_DOWN or silent past the grace)
--   | idx u16 | epoch u32 (+1 at every new lifecycle: entries of older epochs are invisible)
--   | heartbeat ms (double) | last snapshot commit ms (double, 0 = none) | generation u32
--   (0 = none yet) | strict c1 ('1' once a snapshot committed: only the current generation is
--   visible; '0' soft: every entry of the epoch is) | version (32 hex, or empty) '\0' | mediums
--   (comma separated)
-- Engine entries of one block: concatenated, one per (reporter, medium): idx u16 | epoch u32 |
--   generation u32 | medium length u8 | medium | spec count u8 | (name length u8 | name |
--   uri length u16 | uri)*
--
-- Reply: {1, codes, version, retry_after_ms, snapshot_required}: `codes` one byte per event
--   (the ErrorCode number: 1 OK, 10 NODE_NOT_REGISTERED, 13 SNAPSHOT_RATE_LIMITED); `version`
--   the committed generation's version after the request ('' if none).
-- Example: a fresh reporter sends {'R', 'A' k1 'gpu\0tp0\0uri'} -> reporter created (epoch 1),
--   generation 1 with version ARGV[4], k1's entry (idx 1, epoch 1, gen 1, gpu, tp0=uri);
--   reply {1, '\1\1', ARGV[4], 0, 1}.
if #KEYS ~= 2 or #ARGV < 4 then return redis.error_reply('report_event: expected 2 keys and >= 4 args') end
local REP, ENG, id = KEYS[1], KEYS[2], ARGV[1]
local grace, min_interval = tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function split(s, from)
  local out, p = {}, from
  while p <= #s + 1 do
    local z = s:find('\0', p, true) or (#s + 1)
    out[#out + 1] = s:sub(p, z - 1)
    p = z + 1
  end
  return out
end

-- The reporter, decoded (nil if never seen).
local rep
do
  local raw = redis.call('HGET', REP, id)
  if raw then
    local state, idx, epoch, hb, snap, gen, strict, p = struct.unpack('<c1I2I4ddI4c1', raw)
    local z = raw:find('\0', p, true)
    rep = {state = state, idx = idx, epoch = epoch, hb = hb, snap = snap, gen = gen, strict = strict,
           version = raw:sub(p, z - 1), mediums = raw:sub(z + 1)}
    if rep.state == 'A' and now - rep.hb > grace then rep.state = 'T' end
  end
end
local function save()
  redis.call('HSET', REP, id, struct.pack('<c1I2I4ddI4c1', rep.state, rep.idx, rep.epoch, rep.hb, rep.snap,
    rep.gen, rep.strict) .. rep.version .. '\0' .. rep.mediums)
end
-- A reporter seen for the first time: a new index, epoch 1, live now.
local function create()
  local idx = redis.call('HINCRBY', REP, '#seq', 1)
  if idx > 65535 then return false end
  redis.call('HSET', REP, '#' .. idx, id)
  rep = {state = 'A', idx = idx, epoch = 1, hb = now, snap = 0, gen = 0, strict = '0', version = '', mediums = ''}
  return true
end
local function merge_mediums(list)
  local have = {}
  for m in string.gmatch(rep.mediums, '[^,]+') do have[m] = true end
  for _, m in ipairs(list) do
    if m ~= '' and not have[m] then
      have[m] = true
      rep.mediums = rep.mediums == '' and m or (rep.mediums .. ',' .. m)
    end
  end
end

-- Entries of one block: decoded lazily per block, written back once at the end. `raw` holds
-- every touched block's stored value (prefetched in a few HMGETs, false = none); `fresh` the
-- new value of a block that had none, built without decoding (the common case of an add).
local blocks, dirty, raw, fresh = {}, {}, {}, {}
local function decode(bytes, into)
  local p = 1
  while bytes and p <= #bytes do
    local idx, epoch, gen, mlen = struct.unpack('<I2I4I4B', bytes, p)
    p = p + 11
    local medium = bytes:sub(p, p + mlen - 1)
    p = p + mlen
    local n = bytes:byte(p)
    p = p + 1
    local specs, order = {}, {}
    for _ = 1, n do
      local nl = bytes:byte(p)
      local name = bytes:sub(p + 1, p + nl)
      p = p + 1 + nl
      local ul = struct.unpack('<I2', bytes, p)
      specs[name] = bytes:sub(p + 2, p + 1 + ul)
      order[#order + 1] = name
      p = p + 2 + ul
    end
    into[#into + 1] = {idx = idx, epoch = epoch, gen = gen, medium = medium, specs = specs, order = order}
  end
  return into
end
local function entries(key)
  local e = blocks[key]
  if e then return e end
  e = decode(fresh[key] or raw[key], {})
  if fresh[key] then
    fresh[key] = nil
    dirty[key] = true
  end
  blocks[key] = e
  return e
end
-- The header of this reporter's entries in its current lifecycle and generation (built once
-- per generation, not per block).
local hdr, hdr_gen = nil, -1
local function header()
  if hdr_gen ~= rep.gen then hdr, hdr_gen = struct.pack('<I2I4I4', rep.idx, rep.epoch, rep.gen), rep.gen end
  return hdr
end
-- This reporter's entry for `medium` on `key` (its current epoch only; an older one is dropped).
local function own(key, medium, create_it)
  local e = entries(key)
  for i = #e, 1, -1 do
    local x = e[i]
    if x.idx == rep.idx and (x.epoch ~= rep.epoch) then
      table.remove(e, i)
      dirty[key] = true
    end
  end
  for _, x in ipairs(e) do
    if x.idx == rep.idx and x.medium == medium then return x end
  end
  if not create_it then return nil end
  local x = {idx = rep.idx, epoch = rep.epoch, gen = rep.gen, medium = medium, specs = {}, order = {}}
  e[#e + 1] = x
  dirty[key] = true
  return x
end
local function set_spec(x, name, uri)
  if not x.specs[name] then x.order[#x.order + 1] = name end
  x.specs[name] = uri
end
-- Sets this reporter's entry for the tail's medium on `key` to exactly the tail's specs
-- (replace) or merges them in by name (not replace).
local function put(key, tail, replace)
  if not blocks[key] and not fresh[key] and not raw[key] then
    fresh[key] = header() .. tail
    return
  end
  local parsed = decode(struct.pack('<I2I4I4', 0, 0, 0) .. tail, {})[1]
  local x = own(key, parsed.medium, true)
  if replace then x.specs, x.order = {}, {} end
  for _, name in ipairs(parsed.order) do set_spec(x, name, parsed.specs[name]) end
  x.gen = rep.gen
  dirty[key] = true
end
-- Whether an entry can still be visible: its reporter exists, the entry is of the reporter's
-- current lifecycle and, once a snapshot committed, of its current generation. Entries that
-- cannot are dropped whenever their block is written back (the worker collects the rest).
local others = {}
local function current(x)
  local r
  if x.idx == rep.idx then
    r = rep
  else
    r = others[x.idx]
    if r == nil then
      local rid = redis.call('HGET', REP, '#' .. x.idx)
      local rec = rid and redis.call('HGET', REP, rid)
      r = false
      if rec then
        local _, _, epoch, _, _, gen, strict = struct.unpack('<c1I2I4ddI4c1', rec)
        r = {epoch = epoch, gen = gen, strict = strict}
      end
      others[x.idx] = r
    end
  end
  return r and x.epoch == r.epoch and (r.strict ~= '1' or x.gen == r.gen)
end
local function flush()
  local sets, dels = {}, {}
  for key, value in pairs(fresh) do
    sets[#sets + 1] = key
    sets[#sets + 1] = value
  end
  for key in pairs(dirty) do
    local out = {}
    for _, x in ipairs(blocks[key]) do
      if not current(x) then x.order = {} end
      local parts = {struct.pack('<I2I4I4B', x.idx, x.epoch, x.gen, #x.medium), x.medium, '', ''}
      local n = 0
      for _, name in ipairs(x.order) do
        local uri = x.specs[name]
        if uri then
          n = n + 1
          parts[#parts + 1] = string.char(#name) .. name .. struct.pack('<I2', #uri) .. uri
        end
      end
      if n > 0 then
        parts[3] = string.char(n)
        out[#out + 1] = table.concat(parts)
      end
    end
    if #out == 0 then
      dels[#dels + 1] = key
    else
      sets[#sets + 1] = key
      sets[#sets + 1] = table.concat(out)
    end
  end
  for c = 1, #sets, 1000 do redis.call('HSET', ENG, unpack(sets, c, math.min(c + 999, #sets))) end
  for c = 1, #dels, 1000 do redis.call('HDEL', ENG, unpack(dels, c, math.min(c + 999, #dels))) end
end
-- The first valid ADD/DELETE of a reporter without a generation starts one.
local required = false
local function generation()
  if rep.gen == 0 then
    rep.gen = 1
    rep.version = ARGV[4]
    required = true
  end
end
if rep and rep.gen == 0 then required = true end

-- Every block the request touches, read in a few HMGETs (not one HGET per event).
do
  local want, seen, j = {}, {}, 5
  while j <= #ARGV do
    local kind = ARGV[j]:sub(1, 1)
    if kind == 'A' or kind == 'D' then
      local key = ARGV[j]:sub(2, 9)
      if not seen[key] then seen[key] = true; want[#want + 1] = key end
    elseif kind == 'S' then
      local count = tonumber(ARGV[j]:sub(2))
      for q = j + 1, j + count do
        local key = ARGV[q]:sub(1, 8)
        if not seen[key] then seen[key] = true; want[#want + 1] = key end
      end
      j = j + count
    end
    j = j + 1
  end
  for c = 1, #want, 1000 do
    local part = redis.call('HMGET', ENG, unpack(want, c, math.min(c + 999, #want)))
    for q = 1, #part do raw[want[c + q - 1]] = part[q] end
  end
end

local codes, retry_after = {}, 0
local i = 5
while i <= #ARGV do
  local ev = ARGV[i]
  local kind = ev:sub(1, 1)
  local code = 1
  if kind == 'R' then
    if not rep then
      if not create() then code = 7 end
    elseif rep.state == 'T' then
      -- A new lifecycle: everything reported before it is invisible at once.
      rep.state, rep.epoch, rep.hb = 'A', rep.epoch + 1, now
      rep.gen, rep.version, rep.strict, rep.snap, rep.mediums = 0, '', '0', 0, ''
      required = true
    else
      rep.hb = now
    end
    if code == 1 then merge_mediums(split(ev, 2)) end
  elseif kind == 'H' then
    if not rep then
      if not create() then code = 7 end
      required = true
    elseif rep.state == 'T' then
      code = 10
    else
      rep.hb = now
    end
  elseif kind == 'X' then
    if rep and rep.state == 'A' then
      rep.state, rep.epoch = 'T', rep.epoch + 1
      rep.gen, rep.version, rep.strict, rep.snap = 0, '', '0', 0
    end
  elseif not rep or rep.state == 'T' then
    -- Data events neither create a reporter nor revive one.
    code = 10
    if kind == 'S' then i = i + tonumber(ev:sub(2)) end
  elseif kind == 'A' then
    generation()
    put(ev:sub(2, 9), ev:sub(10), false)
  elseif kind == 'D' then
    generation()
    local key = ev:sub(2, 9)
    local f = split(ev, 10)
    local x = own(key, f[1], false)
    if x then
      for j = 2, #f do x.specs[f[j]] = nil end
      dirty[key] = true
    end
  elseif kind == 'S' then
    local count = tonumber(ev:sub(2))
    if rep.snap > 0 and now - rep.snap < min_interval then
      code = 13
      retry_after = min_interval - (now - rep.snap)
    else
      -- A new generation holding exactly the items; older entries of the reporter stop being
      -- visible when it commits below (strict), and are collected in the background.
      rep.gen = rep.gen + 1
      rep.version = ARGV[4]
      for j = i + 1, i + count do
        put(ARGV[j]:sub(1, 8), ARGV[j]:sub(9), true)
      end
      rep.strict, rep.snap = '1', now
    end
    i = i + count
  else
    return redis.error_reply('report_event: unknown event ' .. kind)
  end
  codes[#codes + 1] = string.char(code)
  i = i + 1
end
flush()
if rep then save() end
return {1, table.concat(codes), rep and rep.version or '', retry_after, required and 1 or 0}
