-- Shared by the scripts that cast a vote (vote, and post for the poster's
-- own upvote): keeps the voter's vote index (user:<name>:votes).
--
-- index_vote(index, article, posted, dir, now, week) records the vote as
-- article -> +posted (up) or -posted (down), or removes it (none). It first
-- drops the entries of articles whose voting has closed: an article is
-- closed once now - posted >= week (the vote script's own test, week being
-- the voting window in seconds), so the closed ones score [0, now - week]
-- as upvotes and [-(now - week), 0] as downvotes, both bounds inclusive (no
-- score is 0: post times are positive). The index then expires a week after
-- this vote, when every article in it has closed. Together: it holds at
-- most the user's votes of one week. Scores are written with 17 digits, so
-- the post time reads back exactly.
local function index_vote(index, article, posted, dir, now, week)
  local cutoff = string.format('%.17g', now - week)
  redis.call('ZREMRANGEBYSCORE', index, '0', cutoff)
  redis.call('ZREMRANGEBYSCORE', index, '-' .. cutoff, '0')
  if dir == 'up' then
    redis.call('ZADD', index, string.format('%.17g', posted), article)
  elseif dir == 'down' then
    redis.call('ZADD', index, string.format('%.17g', -posted), article)
  else
    redis.call('ZREM', index, article)
  end
  redis.call('EXPIRE', index, week)
end
