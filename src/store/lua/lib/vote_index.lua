-- A vote in its voter's index (user:<name>:votes), for the post and vote
-- scripts. Needs index_time.
--
-- index_vote(index, article, posted, dir, now, week) records the vote as
-- article -> +t (up) or -t (down), t = index_time(posted), or removes it
-- (none), after dropping the entries of closed articles. The index then
-- lives at least a week more, when every article in it has closed.
local function index_vote(index, article, posted, dir, now, week)
  drop_closed(index, now, week)
  if dir == 'up' then
    redis.call('ZADD', index, index_time(posted), article)
  elseif dir == 'down' then
    redis.call('ZADD', index, '-' .. index_time(posted), article)
  else
    redis.call('ZREM', index, article)
  end
  keep_index(index, string.format('%d', week))
end
