-- Shared by every script that writes a vote index (user:<name>:votes):
-- the time it files an article under, the range its closed entries fill,
-- and its lifetime.
--
-- index_time(posted) is the article's post time rounded up to the whole
-- second, printed as an integer. A whole number is what a small sorted set
-- (a listpack, as most users' indexes are) stores as an integer; a
-- fraction it stores as text, and a vote that adds an entry reads every
-- score before the entry's place back from text, which cost a vote more
-- than any other step. Rounded up, an entry never reads as closed while
-- its article is open to voting; it reads as open for at most a second
-- after (myVote shows the vote, which the voted sets still hold then).
local function index_time(posted)
  return string.format('%d', math.ceil(tonumber(posted)))
end

-- drop_closed(index, now, week) drops the entries of articles whose
-- voting has closed. An article is closed
-- once now - posted >= week (the vote script's own test, week being the
-- voting window in seconds), so the closed ones score (0, now - week] as
-- upvotes and [-(now - week), 0) as downvotes: no score is 0 (post times
-- are positive), so one range, [-(now - week), now - week], holds them all
-- and nothing else. The bound is cut to the whole second below: a closed
-- entry may wait for the next tidying, no open one goes (index_time,
-- rounded up, is above it while the article is open).
local function drop_closed(index, now, week)
  local cutoff = string.format('%d', now - week)
  redis.call('ZREMRANGEBYSCORE', index, '-' .. cutoff, cutoff)
end

-- keep_index(index, seconds) makes the index live at least `seconds` more
-- and never less than it already would: the vote script sets an index's
-- lifetime to outlast every vote it may add until it next sets it (see
-- vote.lua), which a shorter one would cut. (TTL: EXPIRE's GT and NX need
-- Redis 7.)
local function keep_index(index, seconds)
  local ttl = redis.call('TTL', index)
  if ttl == -1 or (ttl >= 0 and ttl < tonumber(seconds)) then
    redis.call('EXPIRE', index, seconds)
  end
end
