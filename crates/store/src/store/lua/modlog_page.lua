-- A page of the moderation log, newest first (see scripts/moderation.rs):
-- entries of one index, below an entry number, that match the filters the
-- index does not imply (read within a budget of entries).
--
-- KEYS: [1] the index.
-- ARGV: [1] the entry prefix, [2] the entries asked for, [3] the entry
-- number the page comes after ('+inf': from the newest), [4] the most
-- entries read when filtering, [5] [6] [7] the action, user and article
-- wanted ('' any).
-- Answers {total, {n, at, action, reason, moderator, article, user, until,
-- n, ...}} with one more entry than asked when there is one.
local index, prefix, after = KEYS[1], ARGV[1], ARGV[3]
local want, budget = tonumber(ARGV[2]) + 1, tonumber(ARGV[4])
-- Each filter by its place in an entry as read: action, user, article.
local wanted = {[2] = ARGV[5], [6] = ARGV[6], [5] = ARGV[7]}
local out = {}
local function add(n, e)
  out[#out + 1] = n
  for i = 1, 7 do out[#out + 1] = e[i] end
end
local function read(n)
  return redis.call('HMGET', prefix .. n, 'at', 'action', 'reason', 'moderator', 'article',
    'user', 'until')
end
if ARGV[5] .. ARGV[6] .. ARGV[7] == '' then
  local from = after == '+inf' and after or '(' .. after
  for _, n in ipairs(redis.call('ZRANGE', index, from, '-inf', 'BYSCORE', 'REV', 'LIMIT', 0, want)) do
    add(n, read(n))
  end
  return {redis.call('ZCARD', index), out}
end
local total, below = 0, tonumber(after) or math.huge
for _, n in ipairs(redis.call('ZRANGE', index, 0, budget - 1, 'REV')) do
  local e = read(n)
  local match = true
  for i, value in pairs(wanted) do
    if value ~= '' and e[i] ~= value then match = false end
  end
  if match then
    total = total + 1
    if tonumber(n) < below and #out < 8 * want then add(n, e) end
  end
end
return {total, out}
