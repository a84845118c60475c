-- evict: reclaims up to N serving leaves, coldest first by the chosen index, marking them
-- deleting, taking them out of usage and queueing their deletion — the same transition as
-- removeCache. Evicting a leaf makes its parent a leaf (with the child's recency), so suffixes
-- always go before their prefixes.
--
-- KEYS[1] blocks  KEYS[2] usage  KEYS[3] lru  KEYS[4] lfu  KEYS[5] itouch  KEYS[6] del
-- KEYS[7] lease   the caller's reclaim lease (fencing: the call is refused if it is not theirs)
-- KEYS[8] evict_last  string: the last call's id and reply, kept a minute, so that a call the
--         client resends after its reply was lost answers the same instead of evicting again
-- KEYS[9] icount  hash block -> LFU read count: an evicted leaf's passes to its parent
-- KEYS[10] adaptive  hash: the `adaptive` policy's histograms and ranks (core/src/keys.rs)
-- KEYS[11] ighost    zset: evicted shared blocks -> their eviction's number
-- ARGV[1] bytes per spec group, comma separated, index 0 = every spec
-- ARGV[2] index: "lru" (least recent first), "lfu" (least frequent first) or "adaptive" (the
--         lowest learned hit density among SAMPLES leaves drawn at random, with replacement,
--         from `lru`; the least recently accessed on a tie: optimizer/src/policy/adaptive.rs
--         simulates the same rule, and docs/worker.md describes it)
-- ARGV[3] N, leaves per call (1..1000)
-- ARGV[4] only leaves last accessed before this time (ms); "inf" for any (TTL uses a time)
-- ARGV[5] only storage id ("0" for any)
-- ARGV[6] the lease value the caller holds (`<token>:<worker>`)
-- ARGV[7] stop once this many bytes are freed ("0" = only N limits)
-- ARGV[8] index offset to start from (leaves skipped by an earlier call: other storages)
-- ARGV[9] the call's id (random per call)
--
-- Reply: {1, blocks evicted, bytes freed, next offset, exhausted (0/1)} | {1, -1} (the lease
--        is not the caller's any more: nothing done); a bad argument (a bug) is an error reply.
--        With a storage filter, a call looks at no more than 4N leaves; the caller continues
--        from `next offset` until `exhausted`. By "adaptive" a call makes at most 4N draws of
--        SAMPLES leaves each and `next offset` stays 0 (samples are not ordered); it is exhausted
--        when no draw found a leaf to evict — except with a storage filter, where such a call
--        walks `lru` from ARGV[8] as "lru" would (a storage holding few of the leaves is rarely
--        sampled) and answers as "lru" does.
-- Adaptive bookkeeping: each eviction adds UNIT to `e<cell>` (its class and age,
-- kvcm_core::hit_density::cell) and `events` in KEYS[10]; an evicted shared block is added to
-- KEYS[11], which keeps the latest tenth of `peak` (the most serving blocks seen: a tenth gives
-- the same hit rates as remembering every one, docs/optimizer.md); a write of the block drops
-- its entry (start_write_cache.lua).
-- Example: chain A <- B <- C serving, lru = {C}; N = 2 -> C then B evicted (B became the leaf
--          when C went), lru = {A}; reply {1, 2, bytes}. By "lfu" with icount = {B: 3, C: 2}
--          and C's priority 5: C evicted, B a leaf with priority 5 + 3 = 8, icount = {B: 5}.
--          By "adaptive", leaves P (shared, last access 2 s ago) and Q (rest, 1 s ago), a table
--          where shared leaves of that age have density 0.4 and the rest 0.1, N = 1: Q is
--          evicted (lower density, though more recent), e<cell of Q> += 1000, events += 1.
if #KEYS ~= 11 or #ARGV ~= 9 then return redis.error_reply('evict: expected 11 keys, 9 args') end
if ARGV[2] ~= 'lru' and ARGV[2] ~= 'lfu' and ARGV[2] ~= 'adaptive' then
  return redis.error_reply('evict: index must be lru, lfu or adaptive')
end
local n = tonumber(ARGV[3])
if not n or n < 1 or n > 1000 then return redis.error_reply('evict: N must be within 1..1000') end
-- A lost lease is an outcome of its own, not an error: a bad argument (a bug) must not read
-- as one.
if redis.call('GET', KEYS[7]) ~= ARGV[6] then return {1, -1} end
local last = redis.call('GET', KEYS[8])
if last and #ARGV[9] > 0 and last:sub(1, #ARGV[9] + 1) == ARGV[9] .. ':' then
  -- This very call, resent after its reply was lost: it already evicted; answer the same.
  local again = {1}
  for v in string.gmatch(last:sub(#ARGV[9] + 2), '[^:]+') do again[#again + 1] = tonumber(v) end
  return again
end
local sizes = {}
for s in string.gmatch(ARGV[1], '[^,]+') do sizes[#sizes + 1] = tonumber(s) end
local index = (ARGV[2] == 'lfu') and KEYS[4] or KEYS[3] -- adaptive samples `lru`
local before = ARGV[4]
local only = tonumber(ARGV[5]) or 0
local budget = tonumber(ARGV[7]) or 0
local start = tonumber(ARGV[8]) or 0
local K = {blocks = KEYS[1], usage = KEYS[2], lru = KEYS[3], lfu = KEYS[4], itouch = KEYS[5], del = KEYS[6],
  icount = KEYS[9]}
local evicted, freed, scanned, exhausted = 0, 0, start, 0

-- Evicts `key` (record `rec`) when it serves on the storage being reclaimed: true if it did.
local function take(key, rec)
  local hit = false
  for _, p in ipairs(locs(rec)) do
    if loc_state(rec, p) == 'S' and (only == 0 or loc_storage(rec, p) == only) then
      local bytes = sizes[loc_group(rec, p) + 1] or 0
      usage_add(K, loc_storage(rec, p), -bytes, -1)
      rec = set_state(rec, p, 'D')
      queue_delete(K, key, loc_bytes(rec, p), 'evicted')
      freed = freed + bytes
      hit = true
    end
  end
  if not hit then return false end
  if index == KEYS[4] then
    -- LFU aging: the clock rises to the evicted leaf's frequency.
    local f = tonumber(redis.call('ZSCORE', K.lfu, key) or '0')
    if f > tonumber(redis.call('HGET', K.usage, 'lfu_clock') or '0') then
      redis.call('HSET', K.usage, 'lfu_clock', f)
    end
  end
  redis.call('HSET', K.blocks, key, rec)
  unlink_serving(K, key, rec)
  evicted = evicted + 1
  return true
end

-- Whether the record serves on the storage being reclaimed.
local function on_storage(rec)
  if only == 0 then return true end
  for _, p in ipairs(locs(rec)) do
    if loc_state(rec, p) == 'S' and loc_storage(rec, p) == only then return true end
  end
  return false
end

-- A stale index entry (the block is gone or no longer serving): drop it.
local function stale(key)
  redis.call('ZREM', K.lru, key)
  redis.call('ZREM', K.lfu, key)
end

local fallback = false
if ARGV[2] == 'adaptive' then
  -- kvcm_core::hit_density: BUCKETS, SAMPLES, UNIT, RANK_WIDTH; optimizer/src/policy/adaptive.rs:
  -- GHOST_DIVISOR.
  local BUCKETS, SAMPLES, UNIT, GHOST_DIVISOR, RANK_WIDTH = 128, 32, 1000, 10, 3
  -- Each cell's rank by density (kvcm_core::hit_density::ranks), read per sampled leaf at its
  -- offset: parsing the whole table of densities cost ~70–85 µs per call. An instance whose table
  -- was learned by an older kvcm (a `table`, no `ranks` yet) is ranked by parsing the table until
  -- its next learning step. None learned yet: every leaf ranks 0, and the least recent of the
  -- samples goes.
  local ranks = redis.call('HGET', KEYS[10], 'ranks')
  local rank
  if ranks then
    rank = function(cell) return tonumber(ranks:sub(cell * RANK_WIDTH + 1, (cell + 1) * RANK_WIDTH)) or 0 end
  else
    local densities = {}
    for v in string.gmatch(redis.call('HGET', KEYS[10], 'table') or '', '[^,]+') do
      densities[#densities + 1] = tonumber(v)
    end
    rank = function(cell) return densities[cell + 1] or 0 end
  end
  local now = now_ms()
  local function class(rec)
    local f = rec:byte(1)
    if math.floor(f / 2) % 2 == 1 then return 1 end
    if math.floor(f / 4) % 2 == 1 then return 2 end
    return 0
  end
  -- The ghost's bound follows the most serving blocks seen.
  local serving = 0
  local u = redis.call('HGETALL', K.usage)
  for i = 1, #u, 2 do
    if u[i]:sub(1, 1) == 'n' then serving = serving + (tonumber(u[i + 1]) or 0) end
  end
  local peak = tonumber(redis.call('HGET', KEYS[10], 'peak') or '0')
  if serving > peak then
    peak = serving
    redis.call('HSET', KEYS[10], 'peak', peak)
  end
  local draws = 0
  while evicted < n and draws < n * 4 and (budget <= 0 or freed < budget) do
    draws = draws + 1
    local sample = redis.call('ZRANDMEMBER', K.lru, -SAMPLES, 'WITHSCORES')
    if #sample == 0 then exhausted = 1 break end
    local keys = {}
    for i = 1, #sample, 2 do keys[#keys + 1] = sample[i] end
    local recs = redis.call('HMGET', K.blocks, unpack(keys))
    local victim, vrec, vdensity, vlast, vcell
    for i = 1, #keys do
      local rec = recs[i]
      if not rec or not has_serving(rec) then
        stale(keys[i])
      elseif on_storage(rec) then
        local last = tonumber(sample[2 * i])
        local age = now - last
        if age < 0 then age = 0 end
        local cell = class(rec) * BUCKETS + age_bucket(age)
        local d = rank(cell)
        if not victim or d < vdensity or (d == vdensity and last < vlast) then
          victim, vrec, vdensity, vlast, vcell = keys[i], rec, d, last, cell
        end
      end
    end
    if victim then
      local shared = math.floor(vrec:byte(1) / 2) % 2 == 1
      if take(victim, vrec) then
        -- Learning bookkeeping after the eviction's writes: pcall, so that a damaged field
        -- (not an integer) costs the count, never a half-done eviction.
        redis.pcall('HINCRBY', KEYS[10], 'e' .. vcell, UNIT)
        redis.pcall('HINCRBY', KEYS[10], 'events', 1)
        local gseq = redis.pcall('HINCRBY', KEYS[10], 'gseq', 1)
        if shared and type(gseq) == 'number' then
          redis.call('ZADD', KEYS[11], gseq, victim)
          local keep = math.floor(math.max(peak, GHOST_DIVISOR) / GHOST_DIVISOR)
          local over = redis.call('ZCARD', KEYS[11]) - keep
          if over > 0 then redis.call('ZREMRANGEBYRANK', KEYS[11], 0, over - 1) end
        end
      end
    end
  end
  scanned = 0
  if evicted == 0 and draws >= n * 4 then
    -- No sampled leaf serves on the storage being reclaimed (it holds few of the leaves): this
    -- call walks `lru` instead, as LRU would, so that a full storage is never left full.
    if only ~= 0 then fallback = true else exhausted = 1 end
  end
end
if ARGV[2] ~= 'adaptive' or fallback then
  scanned = start
  while evicted < n and scanned < start + n * 4 and (budget <= 0 or freed < budget) do
    local cand
    if before ~= 'inf' and index == KEYS[3] then
      cand = redis.call('ZRANGEBYSCORE', index, '-inf', '(' .. before, 'LIMIT', scanned, 1)
    else
      cand = redis.call('ZRANGE', index, scanned, scanned)
    end
    if #cand == 0 then exhausted = 1 break end
    local key = cand[1]
    local rec = redis.call('HGET', K.blocks, key)
    if not rec or not has_state(rec, 'S') then
      stale(key)
    elseif not take(key, rec) then
      scanned = scanned + 1 -- serving, but on another storage than the one being reclaimed
    end
  end
end
redis.call('SET', KEYS[8], string.format('%s:%d:%d:%d:%d', ARGV[9], evicted, freed, scanned, exhausted), 'PX', 60000)
return {1, evicted, freed, scanned, exhausted}
