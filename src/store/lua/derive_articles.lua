-- Re-derives articles from the book's keys (see scripts/derive.rs): the
-- ones named (by notifications: see lib/derive.lua), or a batch of the
-- sweep through time:. Needs karma, group_list, index_time, voters and
-- derive.
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
-- new article must be to be announced, in seconds, [20] the most voters
-- indexed in the script, [21..24] the periods' lengths in seconds (all but
-- all-time), [25..29] the period names, [30] 'ids' or 'sweep', then:
--   ids:   [31..] the article ids;
--   sweep: [31] the post time to start from, [32] the articles posted at
--          it already done, [33] the batch size;
--   round: [31] the batch size, from where KEYS[9] says (fields from and
--          skip), which is moved on (back to the start after the newest).
-- Answers {'derived', changed, n, n voters-left ids..., absent ids...}
-- for ids (absent: not in time: and score:, e.g. named by the first of
-- the book's several writes of a post), and
-- {'swept', seen, changed, next from ('' at the end), next skip,
-- voters-left ids...} for a sweep.
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
  announce_secs = tonumber(ARGV[19]), inline_voters = tonumber(ARGV[20]),
  period_secs = {tonumber(ARGV[21]), tonumber(ARGV[22]), tonumber(ARGV[23]), tonumber(ARGV[24])},
  period_names = {ARGV[25], ARGV[26], ARGV[27], ARGV[28], ARGV[29]},
  now = tonumber(t[1]) + tonumber(t[2]) / 1000000,
}
local mode = ARGV[30]
local changed, left, absent = 0, {}, {}
local function derive(id)
  local status = derive_article(c, id)
  if status == 'changed' then changed = changed + 1 end
  if status == 'voters' then left[#left + 1] = id end
  if status == 'absent' then absent[#absent + 1] = id end
end
if mode == 'ids' then
  c.notified = true
  for i = 31, #ARGV do derive(ARGV[i]) end
  local reply = {'derived', changed, #left}
  for _, id in ipairs(left) do reply[#reply + 1] = id end
  for _, id in ipairs(absent) do reply[#reply + 1] = id end
  return reply
end
local from, skip, batch
if mode == 'round' then
  local at = redis.call('HMGET', KEYS[9], 'from', 'skip')
  from, skip, batch = at[1] or '-inf', tonumber(at[2]) or 0, tonumber(ARGV[31])
else
  from, skip, batch = ARGV[31], tonumber(ARGV[32]), tonumber(ARGV[33])
end
local items = redis.call('ZRANGEBYSCORE', c.by_time, from, '+inf', 'WITHSCORES', 'LIMIT', skip, batch)
for i = 1, #items, 2 do
  local m = items[i]
  if string.sub(m, 1, #c.article_prefix) == c.article_prefix then
    derive(string.sub(m, #c.article_prefix + 1))
  end
end
local seen = #items / 2
local next_from, next_skip = '', 0
if seen == batch then
  -- The next batch starts at the last post time, past the articles of
  -- this one posted at that instant (a run of them may span batches).
  next_from = items[#items]
  for i = #items, 2, -2 do
    if items[i] ~= next_from then break end
    next_skip = next_skip + 1
  end
  if tonumber(next_from) == tonumber(from) then next_skip = next_skip + skip end
end
if mode == 'round' then
  redis.call('HSET', KEYS[9], 'from', next_from == '' and '-inf' or next_from, 'skip', next_skip)
end
local reply = {'swept', seen, changed, next_from, next_skip}
for _, id in ipairs(left) do reply[#reply + 1] = id end
return reply
