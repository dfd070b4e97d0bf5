-- Shared by every script that writes a vote index (user:<name>:votes).
--
-- index_time(posted) is the article's post time rounded up to the whole
-- second: a small sorted set stores a whole number as an integer, a
-- fraction as text it must parse again on every insert. Rounded up, an
-- entry never reads as closed while its article is open to voting.
local function index_time(posted)
  return string.format('%d', math.ceil(tonumber(posted)))
end

-- drop_closed(index, now, week) drops the entries of articles whose voting
-- has closed (now - posted >= week): upvotes score (0, now - week] and
-- downvotes [-(now - week), 0), so one range holds them all. The bound is
-- cut to the whole second below, so no open entry goes.
local function drop_closed(index, now, week)
  local cutoff = string.format('%d', now - week)
  redis.call('ZREMRANGEBYSCORE', index, '-' .. cutoff, cutoff)
end

-- keep_index(index, seconds) makes the index live at least `seconds` more,
-- never less than it already would. (EXPIRE's GT and NX need Redis 7.)
local function keep_index(index, seconds)
  local ttl = redis.call('TTL', index)
  if ttl == -1 or (ttl >= 0 and ttl < tonumber(seconds)) then
    redis.call('EXPIRE', index, seconds)
  end
end
