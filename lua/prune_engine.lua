-- prune_engine: drops, from the given blocks, engine-reported entries that can never be visible
-- again (the worker's background collection; lua/report_event.lua drops them too whenever it
-- writes a block back). An entry is kept while its reporter exists, is registered (not
-- HOST_DOWN, heard from within the cleanup grace), the entry is of the reporter's current
-- lifecycle and, once a snapshot committed, of its current generation.
--
-- KEYS[1] reporters  (see lua/report_event.lua for all three)
-- KEYS[2] engine     presence records
-- KEYS[3] specs
-- ARGV[1] cleanup grace, ms
-- ARGV[2..] block keys (8 bytes)
--
-- Reply: {1, entries dropped, blocks emptied}
-- Example: block k holds records of reporters 1 (current) and 2 (HOST_DOWN since) -> k keeps
--   reporter 1's record, reporter 2's specs field goes; reply {1, 1, 0}.
if #KEYS ~= 3 or #ARGV < 1 then return redis.error_reply('prune_engine: expected 3 keys and >= 1 arg') end
local REP, ENG, SPC = KEYS[1], KEYS[2], KEYS[3]
local grace = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local reporters = {}
local function alive(idx, epoch, gen)
  local r = reporters[idx]
  if r == nil then
    r = false
    local rid = redis.call('HGET', REP, '#' .. idx)
    local rec = rid and redis.call('HGET', REP, rid)
    if rec then
      local state, _, e, hb, _, g, strict = struct.unpack('<c1I4I4ddI4c1', rec)
      if state == 'A' and now - hb <= grace then r = {epoch = e, gen = g, strict = strict} end
    end
    reporters[idx] = r
  end
  return r and epoch == r.epoch and (r.strict ~= '1' or gen == r.gen)
end
local dropped, emptied = 0, 0
for i = 2, #ARGV do
  local key = ARGV[i]
  local raw = redis.call('HGET', ENG, key)
  if raw then
    local keep, gone = {}, {}
    for p = 1, #raw - 12, 13 do
      local idx, epoch, gen, mid = struct.unpack('<I4I4I4B', raw, p)
      if alive(idx, epoch, gen) then
        keep[#keep + 1] = raw:sub(p, p + 12)
      else
        gone[#gone + 1] = key .. struct.pack('<I4B', idx, mid)
      end
    end
    if #gone > 0 then
      dropped = dropped + #gone
      redis.call('HDEL', SPC, unpack(gone))
      if #keep == 0 then
        redis.call('HDEL', ENG, key)
        emptied = emptied + 1
      else
        redis.call('HSET', ENG, key, table.concat(keep))
      end
    end
  end
end
return {1, dropped, emptied}
