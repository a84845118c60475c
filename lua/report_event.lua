-- report_event: one ReportEvent request of one reporter (an engine's own cache tier on one host:
-- `<storage type>|<host_ip_port>`), applied atomically in the instance's slot, so any frontend
-- takes any reporter's events and a frontend restart loses nothing (docs/events.md).
--
-- KEYS[1] reporters  hash reporter id -> reporter record; '#<idx>' -> reporter id; '#seq'
--                    -> the last reporter index handed out; '%<medium>' -> medium id (1..255);
--                    '%seq' -> the last medium id handed out; '#ver' -> a token replaced
--                    whenever anything here but a heartbeat time changes ('#vseq' its counter)
-- KEYS[2] engine     hash block key (8 bytes) -> presence: one 13-byte record per (reporter,
--                    medium) holding the block: idx u32 | epoch u32 | generation u32 | medium id
--                    u8 (all a getHostCacheState read needs)
-- KEYS[3] specs      hash block key .. idx u32 .. medium id u8 -> that entry's specs: count u8 |
--                    (name length u8 | name | uri length u16 | uri)*
-- ARGV[1] reporter id
-- ARGV[2] cleanup grace, ms: a reporter silent this long is gone (unregistered) for events
-- ARGV[3] snapshot min interval, ms
-- ARGV[4] a fresh 32-hex version, used if this request starts a generation, and the base of the
--         reporters hash's '#ver' token if it changes it
-- ARGV[5..] events, one per argument, validated by the caller (core/src/store/report_event.rs):
--   'R' medium '\0' medium ...                 NODE_REGISTER
--   'H'                                        HEARTBEAT
--   'X'                                        HOST_DOWN (alone in its request)
--   'A' key(8) mlen u8 medium specs            BLOCK_ADD (specs as stored, above)
--   'D' key(8) mlen u8 medium name '\0' name... BLOCK_DELETE
--   'S' count                                  BLOCK_SNAPSHOT, its `count` items in the next
--                                              arguments: key(8) mlen u8 medium specs
--   'B' idx u32 epoch u32 gen u32 count ':' (mid u8 | name length u8 | medium)*
--                                              `count` BLOCK_ADDs the frontend prepared against
--                                              the reporter record and medium ids it read
--                                              (distinct blocks), last in the request: then
--                                              three arguments, each packed for the batch
--                                              (Valkey parses 3 arguments, not 2 per block):
--                                              the `count` keys (8 bytes each), the medium ids
--                                              (one byte per block, as read), and the specs
--                                              (each as stored, above, after its length u32)
--
-- Reporter record: state c1 ('A' active, 'T' unregistered: HOST_DOWN or silent past the grace)
--   | idx u32 | epoch u32 (+1 at every new lifecycle: records of older epochs are invisible)
--   | heartbeat ms (double) | last snapshot commit ms (double, 0 = none) | generation u32
--   (0 = none yet) | strict c1 ('1' once a snapshot committed: only the current generation is
--   visible; '0' soft: every record of the epoch is) | version (32 hex, or empty) '\0' | mediums
--   (comma separated)
--
-- Reply: {1, codes, version, retry_after_ms, snapshot_required, adds stored as prepared ('B')}:
--   `codes` one byte per event
--   (the ErrorCode number: 1 OK, 7 REACH_MAX_ENTITY_CAPACITY, 10 NODE_NOT_REGISTERED, 13
--   SNAPSHOT_RATE_LIMITED); `version` the committed generation's version after the request ('' if
--   none).
-- Example: a fresh reporter sends {'R', 'A' k1 '\3gpu' specs} -> reporter created (idx 1, epoch
--   1), generation 1 with version ARGV[4], engine k1 = (1, 1, 1, gpu's id), specs k1..1..id =
--   specs; reply {1, '\1\1', ARGV[4], 0, 1}.
if #KEYS ~= 3 or #ARGV < 4 then return redis.error_reply('report_event: expected 3 keys and >= 4 args') end
local REP, ENG, SPC, id = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
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

-- The reporter, decoded (nil if never seen), and its record as stored.
local rep
local stored = redis.call('HGET', REP, id)
do
  local raw = stored
  if raw then
    local state, idx, epoch, hb, snap, gen, strict, p = struct.unpack('<c1I4I4ddI4c1', raw)
    local z = raw:find('\0', p, true)
    rep = {state = state, idx = idx, epoch = epoch, hb = hb, snap = snap, gen = gen, strict = strict,
           version = raw:sub(p, z - 1), mediums = raw:sub(z + 1)}
    if rep.state == 'A' and now - rep.hb > grace then rep.state = 'T' end
  end
end
-- A change to the `reporters` hash in more than heartbeat times: its '#ver' field gets a token
-- unique to this run (ARGV[4], fresh per request, and a counter, so that a resent request's
-- run differs too), which frontends' copies of the hash are checked against
-- (core/src/store/report_event.rs, CachedReporters). Set where each change is made, so that a
-- run cut short still leaves its changes marked.
local ver_token
local function reporters_changed()
  if not ver_token then ver_token = ARGV[4] .. ':' .. redis.call('HINCRBY', REP, '#vseq', 1) end
  redis.call('HSET', REP, '#ver', ver_token)
end
local function save()
  local record = struct.pack('<c1I4I4ddI4c1', rep.state, rep.idx, rep.epoch, rep.hb, rep.snap, rep.gen,
    rep.strict) .. rep.version .. '\0' .. rep.mediums
  -- Bytes 10..17 are the heartbeat time.
  redis.call('HSET', REP, id, record)
  if not stored or record:sub(1, 9) ~= stored:sub(1, 9) or record:sub(18) ~= stored:sub(18) then
    reporters_changed()
  end
end
-- A reporter seen for the first time: a new index, epoch 1, live now.
local function create()
  local idx = redis.call('HINCRBY', REP, '#seq', 1)
  if idx > 4294967295 then return false end
  redis.call('HSET', REP, '#' .. idx, id)
  rep = {state = 'A', idx = idx, epoch = 1, hb = now, snap = 0, gen = 0, strict = '0', version = '', mediums = ''}
  return true
end
-- Adds `list` to the reporter's media; false (and nothing added) past 64 media.
local function merge_mediums(list)
  local have, n, fresh = {}, 0, {}
  for m in string.gmatch(rep.mediums, '[^,]+') do have[m] = true; n = n + 1 end
  for _, m in ipairs(list) do
    if m ~= '' and not have[m] then
      have[m] = true
      fresh[#fresh + 1] = m
    end
  end
  if n + #fresh > 64 then return false end
  for _, m in ipairs(fresh) do rep.mediums = rep.mediums == '' and m or (rep.mediums .. ',' .. m) end
  return true
end

-- Presence of each touched block: its value in `engine` (records of 13 bytes: idx u32 | epoch
-- u32 | generation u32 | medium id u8), prefetched in a few HMGETs (false = none), changed in
-- place and written back once. Specs live apart, in `specs`, under key .. idx .. medium id.
local pres, pdirty, had = {}, {}, {}
local sset, sdel = {}, {}
-- This reporter's record for a medium, and the tail of its specs fields, built once per
-- (lifecycle, generation, medium) rather than per block.
local recs, tails, r_idx, r_epoch, r_gen = {}, {}, -1, -1, -1
local function rec(mid)
  if r_idx ~= rep.idx or r_epoch ~= rep.epoch or r_gen ~= rep.gen then
    recs, r_idx, r_epoch, r_gen = {}, rep.idx, rep.epoch, rep.gen
  end
  local r = recs[mid]
  if not r then
    r = struct.pack('<I4I4I4B', rep.idx, rep.epoch, rep.gen, mid)
    recs[mid] = r
  end
  return r
end
local function spec_field(key, idx, mid)
  if idx == rep.idx then
    local t = tails[mid]
    if not t then
      t = struct.pack('<I4B', idx, mid)
      tails[mid] = t
    end
    return key .. t
  end
  return key .. struct.pack('<I4B', idx, mid)
end
-- The medium's id (instance-wide, 1..255), created if new; nil when all 255 are taken.
local mids = {}
local function medium_id(name)
  local m = mids[name]
  if m then return m end
  m = tonumber(redis.call('HGET', REP, '%' .. name) or '0')
  if m == 0 then
    m = redis.call('HINCRBY', REP, '%seq', 1)
    if m > 255 then return nil end
    redis.call('HSET', REP, '%' .. name, m)
    reporters_changed()
  end
  mids[name] = m
  return m
end
-- Position of this reporter's record for `mid` in `r` (any epoch), or nil.
local function find(r, mid)
  if not r then return nil end
  for p = 1, #r, 13 do
    if struct.unpack('<I4', r, p) == rep.idx and r:byte(p + 12) == mid then return p end
  end
  return nil
end
-- Specs blob (n u8 | (name length u8 | name | uri length u16 | uri)*) <-> ordered list.
local function decode_specs(blob)
  local out, p = {}, 2
  for _ = 1, (blob and blob:byte(1) or 0) do
    local nl = blob:byte(p)
    local name = blob:sub(p + 1, p + nl)
    p = p + 1 + nl
    local ul = struct.unpack('<I2', blob, p)
    out[#out + 1] = {name, blob:sub(p + 2, p + 1 + ul)}
    p = p + 2 + ul
  end
  return out
end
local function encode_specs(list)
  local parts = {string.char(#list)}
  for _, s in ipairs(list) do
    parts[#parts + 1] = string.char(#s[1]) .. s[1] .. struct.pack('<I2', #s[2]) .. s[2]
  end
  return table.concat(parts)
end
-- The specs currently stored for a field (this request's pending write first).
local function stored_specs(field)
  if sdel[field] then return nil end
  return sset[field] or redis.call('HGET', SPC, field)
end
-- Sets this reporter's entry for medium `mid` on `key`: exactly `blob`'s specs (replace), or
-- merged by name into what the current lifecycle reported before.
-- Whether the record at `p` of `r` is visible as this reporter's current state: its lifecycle
-- and, once a snapshot committed, its generation (an entry the snapshot left out is not merged
-- into: it is gone, and an add starts it afresh).
local function live_own(r, p)
  local epoch, gen = struct.unpack('<I4I4', r, p + 4)
  return epoch == rep.epoch and (rep.strict ~= '1' or gen == rep.gen)
end
local function put(key, mid, blob, replace)
  local r = pres[key]
  local p = find(r, mid)
  local field = spec_field(key, rep.idx, mid)
  if p and live_own(r, p) and not replace then
    local old = stored_specs(field)
    if old and old ~= blob then
      local merged, at = decode_specs(old), {}
      for i, s in ipairs(merged) do at[s[1]] = i end
      for _, s in ipairs(decode_specs(blob)) do
        if at[s[1]] then merged[at[s[1]]][2] = s[2] else merged[#merged + 1] = s end
      end
      -- Spec names are the instance's (checked by the caller); past 255 the count byte would
      -- overflow: refused, nothing changed.
      if #merged > 255 then return 5 end
      blob = encode_specs(merged)
    end
  end
  if p then
    pres[key] = r:sub(1, p - 1) .. rec(mid) .. r:sub(p + 13)
  elseif r and #r >= 13 * 256 then
    -- 256 (reporter, medium) records per block at most: a read of a prompt stays bounded.
    return 7
  else
    pres[key] = (r or '') .. rec(mid)
  end
  pdirty[key] = true
  sset[field], sdel[field] = blob, nil
  return 1
end
-- Drops the named specs of this reporter's current entry for `mid` on `key`; the entry goes
-- with its last spec.
local function drop(key, mid, names)
  local r = pres[key]
  local p = find(r, mid)
  if not p or not live_own(r, p) then return end
  local field = spec_field(key, rep.idx, mid)
  local gone, kept = {}, {}
  for _, n in ipairs(names) do gone[n] = true end
  for _, s in ipairs(decode_specs(stored_specs(field))) do
    if not gone[s[1]] then kept[#kept + 1] = s end
  end
  if #kept == 0 then
    pres[key] = r:sub(1, p - 1) .. r:sub(p + 13)
    sset[field], sdel[field] = nil, true
  else
    sset[field] = encode_specs(kept)
  end
  pdirty[key] = true
end
-- Whether a record can still be visible: its reporter exists, the record is of the reporter's
-- current lifecycle and, once a snapshot committed, of its current generation. Records that
-- cannot are dropped (with their specs) whenever their block is written back; the worker
-- collects the rest (lua/prune_engine.lua).
local others = {}
local function current(idx, epoch, gen)
  local r
  if idx == rep.idx then
    r = rep
  else
    r = others[idx]
    if r == nil then
      local rid = redis.call('HGET', REP, '#' .. idx)
      local record = rid and redis.call('HGET', REP, rid)
      r = false
      if record then
        local _, _, e, _, _, g, strict = struct.unpack('<c1I4I4ddI4c1', record)
        r = {epoch = e, gen = g, strict = strict}
      end
      others[idx] = r
    end
  end
  return r and epoch == r.epoch and (r.strict ~= '1' or gen == r.gen)
end
local function flush()
  local psets, pdels = {}, {}
  for key in pairs(pdirty) do
    local r, keep = pres[key] or '', {}
    if not had[key] then
      -- Nothing stored before this request: only this reporter's current records.
      if r ~= '' then keep[1] = r end
      r = ''
    end
    for p = 1, #r, 13 do
      local idx, epoch, gen, mid = struct.unpack('<I4I4I4B', r, p)
      if current(idx, epoch, gen) then
        keep[#keep + 1] = r:sub(p, p + 12)
      else
        local field = spec_field(key, idx, mid)
        sset[field], sdel[field] = nil, true
      end
    end
    if #keep == 0 then
      pdels[#pdels + 1] = key
    else
      psets[#psets + 1] = key
      psets[#psets + 1] = table.concat(keep)
    end
  end
  local ssets, sdels = {}, {}
  for field, blob in pairs(sset) do
    ssets[#ssets + 1] = field
    ssets[#ssets + 1] = blob
  end
  for field in pairs(sdel) do sdels[#sdels + 1] = field end
  for c = 1, #psets, 1000 do redis.call('HSET', ENG, unpack(psets, c, math.min(c + 999, #psets))) end
  for c = 1, #pdels, 1000 do redis.call('HDEL', ENG, unpack(pdels, c, math.min(c + 999, #pdels))) end
  for c = 1, #ssets, 1000 do redis.call('HSET', SPC, unpack(ssets, c, math.min(c + 999, #ssets))) end
  for c = 1, #sdels, 1000 do redis.call('HDEL', SPC, unpack(sdels, c, math.min(c + 999, #sdels))) end
end
-- What `put` and `flush` make of a block whose stored value `v` gets this reporter's record for
-- medium `mid`: {value = the new value (the records that can still be visible, in order, with
-- this reporter's new record where its old one for `mid` was, current or not, or else
-- appended), dropped = the specs-field tails (idx u32 | medium id u8) of the records that
-- cannot, own = whether that old record is current (then this holds only when the stored specs
-- are the ones sent; otherwise the single-add path, which merges them)}; false when the block
-- has no room for one more record or is not what `put` expects. Worked out once per (value,
-- medium): the blocks of a prefix held by the same reporters share it.
local by_value = {}
local function appended(v, mid)
  local known = by_value[v]
  if not known then
    known = {}
    by_value[v] = known
  end
  local out = known[mid]
  if out ~= nil then return out end
  out = false
  if #v % 13 == 0 then
    local before, after, dropped, at, own, ok = {}, {}, {}, nil, false, true
    for p = 1, #v, 13 do
      local idx, epoch, gen, m = struct.unpack('<I4I4I4B', v, p)
      local visible = current(idx, epoch, gen)
      if idx == rep.idx and m == mid then
        -- `put` replaces the first such record in place (a current one after merging specs);
        -- a second one is left to the single-add path.
        if at then
          ok = false
          break
        end
        at, own = p, visible
      elseif visible then
        local list = at and after or before
        list[#list + 1] = v:sub(p, p + 12)
      else
        dropped[#dropped + 1] = struct.pack('<I4B', idx, m)
      end
    end
    if ok and (at or #v < 13 * 256) then
      out = {value = table.concat(before) .. rec(mid) .. table.concat(after), dropped = dropped, own = own}
    end
  end
  known[mid] = out
  return out
end
-- The first valid ADD/DELETE of a reporter without a generation starts one.
-- True when the reporter had no generation as the request arrived (never seen, unregistered,
-- or none started yet), and when this request starts one.
local required = not rep or rep.state == 'T' or rep.gen == 0
local function generation()
  if rep.gen == 0 then
    rep.gen = 1
    rep.version = ARGV[4]
    required = true
  end
end

-- Every block the request touches, read in a few HMGETs (not one HGET per event); a 'B'
-- batch reads its own, chunk by chunk, as it goes. A 'B' batch is unpacked here, before
-- anything is written: `bchunks[c / 500 + 1]` holds the keys and specs of its blocks c + 1 ..
-- c + 500 (one `struct.unpack` call per list).
local bchunks = {}
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
    elseif kind == 'B' then
      local count = tonumber(ARGV[j]:match('^(%d+):', 14))
      if j + 3 ~= #ARGV or #ARGV[j + 1] ~= 8 * count or #ARGV[j + 2] ~= count then
        return redis.error_reply('report_event: a B batch must come last, with its keys, ids and specs')
      end
      local bkeys, bspecs, sp, kfmt, sfmt = ARGV[j + 1], ARGV[j + 3], 1, '', ''
      for c = 0, count - 1, 500 do
        local n = math.min(500, count - c)
        if n ~= #kfmt / 2 then kfmt, sfmt = string.rep('c8', n), '<' .. string.rep('I4c0', n) end
        -- ss[1]: whether the specs unpacked (a length past the end does not).
        local ks, ss = {struct.unpack(kfmt, bkeys, 8 * c + 1)}, {pcall(struct.unpack, sfmt, bspecs, sp)}
        if not ss[1] then break end
        table.remove(ss, 1)
        sp = ss[n + 1]
        bchunks[#bchunks + 1] = {ks, ss}
      end
      if #bchunks ~= math.ceil(count / 500) or sp ~= #bspecs + 1 then
        return redis.error_reply('report_event: a B batch whose specs do not add up to its count')
      end
      j = j + 3
    end
    j = j + 1
  end
  for c = 1, #want, 1000 do
    local part = redis.call('HMGET', ENG, unpack(want, c, math.min(c + 999, #want)))
    for q = 1, #part do
      pres[want[c + q - 1]] = part[q]
      had[want[c + q - 1]] = part[q] and true or nil
    end
  end
end

-- Codes in request order: numbers in `codes`, turned into bytes in `pieces` as they go.
local codes, pieces, retry_after, prepared = {}, {}, 0, 0
local function flush_codes()
  for c = 1, #codes, 4000 do pieces[#pieces + 1] = string.char(unpack(codes, c, math.min(c + 3999, #codes))) end
  codes = {}
end
-- `n` OK codes at once (a chunk of a 'B' batch stored as sent).
local function ok_codes(n)
  flush_codes()
  pieces[#pieces + 1] = string.rep('\1', n)
end
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
    if code == 1 and not merge_mediums(split(ev, 2)) then code = 7 end
  elseif kind == 'H' then
    if not rep then
      if not create() then code = 7 end
    elseif rep.state == 'T' then
      code = 10
    else
      rep.hb = now
    end
  elseif kind == 'X' then
    if rep and rep.state == 'A' then
      -- The heartbeat field of an unregistered reporter says since when (the worker forgets
      -- the reporter a cleanup grace later: lua/reap_reporters.lua).
      rep.state, rep.epoch, rep.hb = 'T', rep.epoch + 1, now
      rep.gen, rep.version, rep.strict, rep.snap = 0, '', '0', 0
    end
  elseif (not rep and not create()) or rep.state == 'T' then
    -- A data event creates a reporter seen for the first time (as a heartbeat does), but
    -- never revives an unregistered one.
    code = rep and 10 or 7
    if kind == 'S' then i = i + tonumber(ev:sub(2)) end
    if kind == 'B' then
      -- One code per add the batch carries.
      local count = tonumber(ev:match('^(%d+):', 14))
      for _ = 1, count do codes[#codes + 1] = code end
      i = i + 3
      code = nil
    end
  elseif kind == 'A' or kind == 'D' then
    generation()
    local key, mlen = ev:sub(2, 9), ev:byte(10)
    local mid = medium_id(ev:sub(11, 10 + mlen))
    if not mid then
      code = 7
    elseif kind == 'A' then
      code = put(key, mid, ev:sub(11 + mlen), false)
    else
      drop(key, mid, split(ev, 11 + mlen))
    end
  elseif kind == 'S' then
    local count = tonumber(ev:sub(2))
    local items = {}
    for j = i + 1, i + count do
      local item = ARGV[j]
      local mlen = item:byte(9)
      local key, mid = item:sub(1, 8), medium_id(item:sub(10, 9 + mlen))
      local r = pres[key]
      if not mid or (r and #r >= 13 * 256 and not find(r, mid)) then code = 7 end
      items[#items + 1] = {key, mid, item:sub(10 + mlen)}
    end
    if code ~= 1 then
      -- More than 255 media in the instance, or a block at 256 records: refused whole.
    elseif rep.snap > 0 and now - rep.snap < min_interval then
      code = 13
      retry_after = min_interval - (now - rep.snap)
    else
      -- A new generation holding exactly the items; older records of the reporter stop being
      -- visible as it commits (strict), and are collected in the background.
      rep.gen = rep.gen + 1
      rep.version = ARGV[4]
      for _, it in ipairs(items) do put(it[1], it[2], it[3], true) end
      rep.strict, rep.snap = '1', now
    end
    i = i + count
  elseif kind == 'B' then
    -- Adds the frontend prepared against the reporter's record (see the header: distinct
    -- blocks, last in the request). When the record is unchanged since the frontend read it,
    -- each block takes the cheapest path that is exact (docs/events.md): a block nobody holds
    -- is stored under the record read (one HSET per hash and chunk); a block held already —
    -- by others, by this reporter in another medium or an older lifecycle or generation, or by
    -- its current record with the same specs — gets this reporter's record as `appended` works
    -- it out; the rest — specs to merge or none stored, or 256 records without one of this
    -- reporter's in that medium — goes through the single-add path. Every block of the batch
    -- is distinct (the frontend's guarantee), so the paths that write a chunk at once never
    -- see one block twice.
    local e_idx, e_epoch, e_gen = struct.unpack('<I4I4I4', ev, 2)
    local digits = ev:match('^(%d+):', 14)
    local count = tonumber(digits)
    -- The batch's medium ids as the frontend read them (a byte each); its keys and specs
    -- unpacked above (`bchunks`).
    local bids = ARGV[i + 2]
    local same = rep.idx == e_idx and rep.epoch == e_epoch and rep.gen == e_gen and rep.gen > 0
    -- The medium ids the batch carries, checked against the instance's (an
    -- instance removed and registered again meanwhile numbers its media afresh): `real[sent
    -- id]` is the id to use (nil: no room for the medium), and any difference sends every
    -- block through the single-add path.
    local real = {}
    local p = 14 + #digits + 1
    while p <= #ev do
      local sent, len = ev:byte(p, p + 1)
      local m = medium_id(ev:sub(p + 2, p + 1 + len))
      real[sent] = m
      if m ~= sent then same = false end
      p = p + 2 + len
    end
    generation()
    -- This reporter's record and specs-field tail for each medium of the batch, as locals.
    local brec, btail = {}, {}
    if same then
      for _, m in pairs(real) do brec[m], btail[m] = rec(m), spec_field('', rep.idx, m) end
    end
    local untouched = same and next(pdirty) == nil
    for c = 0, count - 1, 500 do
      local last = math.min(c + 499, count - 1)
      local n = last - c + 1
      -- kt[q], st[q]: the q-th block of the chunk's key and specs.
      local kt, st = bchunks[c / 500 + 1][1], bchunks[c / 500 + 1][2]
      local now_held = redis.call('HMGET', ENG, unpack(kt, 1, n))
      local held = false
      for q = 1, n do
        if now_held[q] then held = true break end
      end
      if untouched and not held then
        -- The common case: every block of the chunk new — stored as sent, under this
        -- reporter's record (the one the frontend read: `same`).
        local eng, spc, ids = {}, {}, {bids:byte(c + 1, c + n)}
        for q = 1, n do
          local key, mid = kt[q], ids[q]
          eng[2 * q - 1], eng[2 * q] = key, brec[mid] or rec(mid)
          spc[2 * q - 1], spc[2 * q] = key .. (btail[mid] or spec_field('', rep.idx, mid)), st[q]
        end
        redis.call('HSET', ENG, unpack(eng))
        redis.call('HSET', SPC, unpack(spc))
        ok_codes(n)
        prepared = prepared + n
      else
        -- `how[q]`: what `appended` makes of the block (nil: the single-add path, or new); the
        -- stored specs of the blocks holding this reporter's current record in that medium.
        local fields, at, how, ids = {}, {}, {}, {bids:byte(c + 1, c + n)}
        for q = 0, n - 1 do
          local key, v = kt[q + 1], now_held[q + 1]
          if same and v and not pdirty[key] then
            local o = appended(v, ids[q + 1])
            how[q] = o or nil
            if o and o.own then
              fields[#fields + 1] = spec_field(key, rep.idx, ids[q + 1])
              at[q] = #fields
            end
          end
        end
        local old = #fields > 0 and redis.call('HMGET', SPC, unpack(fields)) or {}
        local eng, spc, gone = {}, {}, {}
        for q = 0, n - 1 do
          local key, mid = kt[q + 1], ids[q + 1]
          local v, blob = now_held[q + 1], st[q + 1]
          if same and not v and not pdirty[key] then
            eng[#eng + 1], eng[#eng + 2] = key, rec(mid)
            spc[#spc + 1], spc[#spc + 2] = spec_field(key, rep.idx, mid), blob
            codes[#codes + 1] = 1
            prepared = prepared + 1
          elseif how[q] and (not how[q].own or old[at[q]] == blob) then
            -- What the single-add path makes of it, worked out once per (stored value, medium):
            -- this reporter's record and specs set (a re-add of the same specs keeps them; when
            -- the new value is the stored one, nothing is written).
            local o = how[q]
            if o.value ~= v then eng[#eng + 1], eng[#eng + 2] = key, o.value end
            if not o.own then spc[#spc + 1], spc[#spc + 2] = spec_field(key, rep.idx, mid), blob end
            for _, tail in ipairs(o.dropped) do gone[#gone + 1] = key .. tail end
            codes[#codes + 1] = 1
            prepared = prepared + 1
          else
            -- What an earlier event of the request made of it, else what is stored.
            if not pdirty[key] then pres[key], had[key] = v, v and true or nil end
            local m = real[mid]
            codes[#codes + 1] = m and put(key, m, blob, false) or 7
          end
        end
        if #eng > 0 then redis.call('HSET', ENG, unpack(eng)) end
        if #spc > 0 then redis.call('HSET', SPC, unpack(spc)) end
        for g = 1, #gone, 1000 do redis.call('HDEL', SPC, unpack(gone, g, math.min(g + 999, #gone))) end
      end
    end
    i = i + 3
    code = nil
  else
    return redis.error_reply('report_event: unknown event ' .. kind)
  end
  if code then codes[#codes + 1] = code end
  i = i + 1
end
flush()
-- (A request whose every event failed validation arrives empty: it reads, and changes nothing.)
if rep and #ARGV > 4 then save() end
flush_codes()
return {1, table.concat(pieces), rep and rep.version or '', retry_after, required and 1 or 0, prepared}
