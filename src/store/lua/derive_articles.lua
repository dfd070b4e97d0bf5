-- Re-derives articles from the book's keys (see scripts/derive.rs): the
-- ones named (by notifications: see lib/derive.lua), or a batch of the
-- sweep through time:. Needs karma, group_list, index_time, voters and
-- derive. Each stops once its articles went through ARGV[20] members.
--
-- KEYS: [1] the time ranking, [2] the score ranking, [3] karma, [4..8] the
-- net-vote rankings of the site, one per period, the all-time one last,
-- [9] (mode round) where the sweep goes on.
-- ARGV: [1] the article prefix, [2] [3] the upvoters' and downvoters'
-- prefixes, [4] the article groups' suffix, [5] the user prefix, [6] the
-- suffix of a user's vote index, [7] [8] the suffixes of a user's score and
-- time rankings, [9] the infix of a user's net-vote rankings, [10] the
-- group prefix, [11] the infix of a group's net-vote rankings, [12] [13]
-- the prefixes of a group's score and time rankings, [14] [15] the
-- channels of score changes and new posts, [16] the voting window in
-- seconds, [17] a vote's score, [18] the net-vote step, [19] how recent a
-- new article must be to be announced, in seconds, [20] the most members
-- (groups, voters) a script goes through, [21..24] the periods' lengths in
-- seconds (all but all-time), [25..29] the period names, [30] the suffix
-- of a group's cached-ranking marker, [31] 'ids', 'sweep' or 'round', then:
--   ids:   [32] how many of the ids that follow have their group lists
--          rebuilt (the first ones), [33..] the article ids;
--   sweep: [32] the post time to start from, [33] the articles posted at
--          it already done, [34] the batch size;
--   round: [32] the batch size, from where KEYS[9] says (fields from and
--          skip), which is moved on (back to the start after the newest).
-- Lists of ids are answered as a count, then the ids. Answers
-- {'derived', changed, voters-left ids, absent ids, recounted ids, ids left
-- to relist, ids left} for ids (absent: not in time: and score:, e.g.
-- named by the first of the book's several writes of a post; recounted:
-- counts rewritten to the voted sets' sizes; left: not reached, or
-- relisted only, once the members were spent), and {'swept', seen,
-- changed, next from ('' at the end), next skip, voters-left ids} for a
-- sweep.
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
local from, skip, batch
if mode == 'round' then
  local at = redis.call('HMGET', KEYS[9], 'from', 'skip')
  from, skip, batch = at[1] or '-inf', tonumber(at[2]) or 0, tonumber(ARGV[32])
else
  from, skip, batch = ARGV[32], tonumber(ARGV[33]), tonumber(ARGV[34])
end
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
if mode == 'round' then
  redis.call('HSET', KEYS[9], 'from', next_from == '' and '-inf' or next_from, 'skip', next_skip)
end
local reply = {'swept', seen, changed, next_from, next_skip}
add_list(reply, left)
return reply
