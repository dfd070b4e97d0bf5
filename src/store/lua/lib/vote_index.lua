-- The poster's own upvote in their vote index (user:<name>:votes), for
-- the post script; the vote script keeps indexes the same way, inline
-- (see vote.lua). Needs index_time.
--
-- index_vote(index, article, posted, dir, now, week) records the vote as
-- article -> +t (up) or -t (down), t = index_time(posted), or removes it
-- (none). It first drops the entries of articles whose voting has closed:
-- an article is closed once now - posted >= week (the vote script's own
-- test, week being the voting window in seconds), so the closed ones
-- score (0, now - week] as upvotes and [-(now - week), 0) as downvotes: no
-- score is 0 (post times are positive), so one range, [-(now - week),
-- now - week], holds them all and nothing else. The bound is cut to the
-- whole second below: a closed entry may wait for the next vote, no open
-- one goes (t, rounded up, is above it while the article is open). The
-- index then lives at least a week more, when every article in it has
-- closed (keep_index).
local function index_vote(index, article, posted, dir, now, week)
  local cutoff = string.format('%d', now - week)
  redis.call('ZREMRANGEBYSCORE', index, '-' .. cutoff, cutoff)
  if dir == 'up' then
    redis.call('ZADD', index, index_time(posted), article)
  elseif dir == 'down' then
    redis.call('ZADD', index, '-' .. index_time(posted), article)
  else
    redis.call('ZREM', index, article)
  end
  keep_index(index, string.format('%d', week))
end
