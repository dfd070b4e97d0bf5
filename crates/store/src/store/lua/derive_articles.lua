-- Re-derives articles from the book's keys (see scripts/derive.rs and
-- lib/derive.lua), until they went through c.budget members. Needs karma,
-- group_list, index_time, voters and derive. Lists of ids are answered as
-- a count, then the ids. Modes (ARGV[31]):
--   ids:   the ids from ARGV[33] on, the first ARGV[32] with their group
--          lists rebuilt; answers {'derived', changed, then the lists of
--          ids: voters left, absent (not in time: and score: yet),
--          recounted, left to relist, left (the members were spent)};
--   sweep: ARGV[34] articles of time: from post time ARGV[32], past the
--          ARGV[33] posted at it; answers {'swept', seen, changed, next
--          post time ('' at the end), next skip, voters-left ids}.
local t = redis.call('TIME')
local c = {
  by_time = KEYS[1], by_score = KEYS[2], karma = KEYS[3],
  top = {KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]},
  article_prefix = ARGV[1], voted_prefix = ARGV[2], downvoted_prefix = ARGV[3],
  groups_suffix = ARGV[4], user_prefix = ARGV[5], user_votes_suffix = ARGV[6],
  user_score_suffix = ARGV[7], user_time_suffix = ARGV[8], user_top_infix = ARGV[9],
  group_prefix = ARGV[10], group_top_infix = ARGV[11],
  group_score_prefix = ARGV[12], group_time_prefix = ARGV[13],
  score_channel = ARGV[14], posted_channel = ARGV[15],
  week = tonumber(ARGV[16]), vote_score = tonumber(ARGV[17]), top_step = tonumber(ARGV[18]),
  announce_secs = tonumber(ARGV[19]), budget = tonumber(ARGV[20]),
  period_secs = {tonumber(ARGV[21]), tonumber(ARGV[22]), tonumber(ARGV[23]), tonumber(ARGV[24])},
  period_names = {ARGV[25], ARGV[26], ARGV[27], ARGV[28], ARGV[29]},
  cached_suffix = ARGV[30], relist = {}, spent = 0,
  now = tonumber(t[1]) + tonumber(t[2]) / 1000000,
}
local mode = ARGV[31]
local changed, left, absent, recounted, rest = 0, {}, {}, {}, {}
local function derive(id)
  local status, rewritten = derive_article(c, id)
  c.spent = c.spent + 1
  if status == 'changed' then changed = changed + 1 end
  if status == 'voters' then left[#left + 1] = id end
  if status == 'absent' then absent[#absent + 1] = id end
  if status == 'relisted' then rest[#rest + 1] = id end
  if rewritten then recounted[#recounted + 1] = id end
end
local function add_list(reply, ids)
  reply[#reply + 1] = #ids
  for _, id in ipairs(ids) do reply[#reply + 1] = id end
end
if mode == 'ids' then
  c.notified = true
  for i = 33, 32 + tonumber(ARGV[32]) do c.relist[ARGV[i]] = true end
  local to_relist = {}
  for i = 33, #ARGV do
    local id = ARGV[i]
    if c.spent < c.budget then derive(id)
    elseif c.relist[id] then to_relist[#to_relist + 1] = id
    else rest[#rest + 1] = id end
  end
  local reply = {'derived', changed}
  for _, ids in ipairs({left, absent, recounted, to_relist, rest}) do add_list(reply, ids) end
  return reply
end
local from, skip, batch = ARGV[32], tonumber(ARGV[33]), tonumber(ARGV[34])
local items = redis.call('ZRANGEBYSCORE', c.by_time, from, '+inf', 'WITHSCORES', 'LIMIT', skip, batch)
local seen = 0
for i = 1, #items, 2 do
  if c.spent >= c.budget then break end
  local m = items[i]
  if string.sub(m, 1, #c.article_prefix) == c.article_prefix then
    derive(string.sub(m, #c.article_prefix + 1))
  end
  seen = seen + 1
end
local next_from, next_skip = '', 0
if seen == batch or seen < #items / 2 then
  -- The next batch starts at the last post time, past the articles of
  -- this one posted at that instant (a run of them may span batches).
  next_from = items[2 * seen]
  for i = 2 * seen, 2, -2 do
    if items[i] ~= next_from then break end
    next_skip = next_skip + 1
  end
  if tonumber(next_from) == tonumber(from) then next_skip = next_skip + skip end
end
local reply = {'swept', seen, changed, next_from, next_skip}
add_list(reply, left)
return reply
