-- redrive_dead_letters: moves dead letters back into the instance's deletion stream, to be
-- tried again once their cause is fixed (a mount back, a permission repaired). Each becomes a
-- new deletion entry with the fields the failed entry had (k, l, f, r, trash) and `redriven` =
-- its dead-letter id, so its attempts start again from zero; the dead letter is removed in the
-- same step. The deleter's claim_delete then keeps a file that a newer write of the key owns,
-- and otherwise holds the key while it unlinks, so a re-drive never deletes a live block's data.
--
-- KEYS[1] del_dead  the dead-letter stream
-- KEYS[2] del       the deletion stream
-- ARGV[1] N: at most this many (1..1000)
-- ARGV[2..] dead-letter ids to re-drive; none: the N oldest
--
-- Reply: {1, redriven, missing}: how many were re-driven, how many of the ids given are not
--        dead letters (already re-driven, or never were); a bad argument (a bug) is an error reply
-- Example: del_dead = {7-0: {k = B, l = loc, r = removed, error = ..., attempts = 8,
--          entry = 5-0}}; no ids -> del += {k = B, l = loc, r = removed, redriven = 7-0},
--          del_dead = {}; reply {1, 1, 0}.
if #KEYS ~= 2 or #ARGV < 1 then return redis.error_reply('redrive_dead_letters: expected 2 keys, >= 1 arg') end
local n = tonumber(ARGV[1])
if not n or n < 1 or n > 1000 then return redis.error_reply('redrive_dead_letters: N must be within 1..1000') end
local entries = {}
local missing = 0
if #ARGV == 1 then
  entries = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', n)
else
  for i = 2, math.min(#ARGV, n + 1) do
    local e = redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i])
    if #e == 1 then entries[#entries + 1] = e[1] else missing = missing + 1 end
  end
end
local KEEP = {k = true, l = true, f = true, r = true, trash = true}
for _, e in ipairs(entries) do
  local id, fields = e[1], e[2]
  local again = {}
  for i = 1, #fields, 2 do
    if KEEP[fields[i]] then
      again[#again + 1] = fields[i]
      again[#again + 1] = fields[i + 1]
    end
  end
  again[#again + 1] = 'redriven'
  again[#again + 1] = id
  redis.call('XADD', KEYS[2], '*', unpack(again))
  redis.call('XDEL', KEYS[1], id)
end
return {1, #entries, missing}
