-- Copies the voters of a batch of the voting window's articles from the
-- voted sets into their vote indexes (see scripts/backfill.rs). Needs
-- index_time and voters.
--
-- KEYS: [1] the time ranking.
-- ARGV: [1] the post time to start from ('': the window's start), [2] the
-- articles posted at ARGV[1] already done, [3] the batch size, [4] the
-- voters read after which the batch stops, [5] the article prefix, [6] the
-- upvoters' and [7] the downvoters' prefixes, [8] the user prefix, [9] the
-- suffix of a user's vote index, [10] the voting window in seconds.
local by_time = KEYS[1]
local from, skip, size, budget = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local article_prefix, voted_prefix, downvoted_prefix, user_prefix, votes_suffix =
  ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local week = tonumber(ARGV[10])
local c = { user_prefix = user_prefix, user_votes_suffix = votes_suffix, week = week }
if from == '' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
  from = '(' .. string.format('%.17g', now - week)
end
local page = redis.call('ZRANGEBYSCORE', by_time, from, '+inf', 'WITHSCORES', 'LIMIT', skip, size)
local articles, entries, spent = 0, 0, 0
local last, same = nil, 0
for i = 1, #page, 2 do
  local article, posted = page[i], page[i + 1]
  if string.sub(article, 1, #article_prefix) == article_prefix then
    local id = string.sub(article, #article_prefix + 1)
    -- Downvoters first: a voter in both sets ends as an upvoter, as the
    -- vote script reads them.
    for _, set in ipairs({{downvoted_prefix, '-'}, {voted_prefix, ''}}) do
      local voters = redis.call('SMEMBERS', set[1] .. id)
      spent = spent + #voters
      entries = entries + index_members(c, article, tonumber(posted), voters, set[2])
    end
  end
  articles = articles + 1
  if posted == last then same = same + 1 else last, same = posted, 1 end
  if spent >= budget then break end
end
if last == nil or (articles * 2 == #page and #page < 2 * size) then
  return {'batch', articles, entries, '', 0}
end
if last == from then same = same + skip end
return {'batch', articles, entries, last, same}
