-- adaptive_decay: the `adaptive` policy's learning step (worker/src/reclaimer.rs, before an
-- instance's eviction round). Once DECAY_EVENTS hits and evictions have been counted since the
-- last step, the density table the worker computed from the histograms
-- (kvcm_core::hit_density::table) and its ranks (what lua/evict.lua compares) are stored, and every histogram
-- cell is multiplied by DECAY (rounded to an integer) once per DECAY_EVENTS events counted, so the ranking follows a
-- workload that changes. optimizer/src/policy/adaptive.rs does the same every DECAY_EVENTS
-- events; live, a step waits for the next round.
--
-- KEYS[1] adaptive  hash (core/src/keys.rs): `h<cell>` / `e<cell>` hits / evictions (integers,
--                   in thousandths of an event: kvcm_core::hit_density::UNIT), `events`,
--                   `table`, `ranks`
-- ARGV[1] the new table: CLASSES x BUCKETS densities, comma separated (for people and tests)
-- ARGV[2] DECAY_EVENTS (> 0)   ARGV[3] DECAY (0 < DECAY <= 1)
-- ARGV[4] the table's ranks, what lua/evict.lua reads: RANK_WIDTH digits per cell, cell after
--         cell (kvcm_core::hit_density::ranks_field)
--
-- Reply: {1, decays applied} — 0 when fewer than DECAY_EVENTS events were counted (nothing
--        changes: another worker took this step already, or it is not due).
-- Example: events = 5000, DECAY_EVENTS 2048, DECAY 0.9, h3 = 100000 -> h3 = 81000, events = 904,
--          table = ARGV[1], ranks = ARGV[4]; reply {1, 2}.
if #KEYS ~= 1 or #ARGV ~= 4 then return redis.error_reply('adaptive_decay: expected 1 key, 4 args') end
local every, decay = tonumber(ARGV[2]), tonumber(ARGV[3])
if not every or every <= 0 or every % 1 ~= 0 or not decay or decay <= 0 or decay > 1 then
  return redis.error_reply('adaptive_decay: bad DECAY_EVENTS or DECAY')
end
-- The table evict.lua parses: CLASSES x BUCKETS numbers (kvcm_core::hit_density).
local cells = 0
for v in string.gmatch(ARGV[1], '[^,]+') do
  if not tonumber(v) then return redis.error_reply('adaptive_decay: the table holds a non-number') end
  cells = cells + 1
end
if cells ~= 384 then return redis.error_reply('adaptive_decay: the table must hold 384 densities') end
if #ARGV[4] ~= 384 * 3 or ARGV[4]:find('%D') then
  return redis.error_reply('adaptive_decay: the ranks must be 384 cells of 3 digits')
end
local events = tonumber(redis.call('HGET', KEYS[1], 'events') or '0')
local steps = math.floor(events / every)
if steps < 1 then return {1, 0} end
local factor = decay ^ steps
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  if all[i]:match('^[he]%d+$') then
    out[#out + 1] = all[i]
    out[#out + 1] = string.format('%d', math.floor((tonumber(all[i + 1]) or 0) * factor + 0.5))
  end
end
out[#out + 1], out[#out + 2] = 'events', events - steps * every
out[#out + 1], out[#out + 2] = 'table', ARGV[1]
out[#out + 1], out[#out + 2] = 'ranks', ARGV[4]
redis.call('HSET', KEYS[1], unpack(out))
return {1, steps}
