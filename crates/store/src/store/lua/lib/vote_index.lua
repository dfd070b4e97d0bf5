-- A vote in its voter's index (user:<name>:votes), for the post, vote and
-- apply_outbox scripts. Needs index_time.
--
-- set_vote(index, article, value, now, week) files the article under
-- value, +t (up) or -t (down) with t = index_time(posted), or removes it
-- ('0'), after dropping the entries of closed articles. The index then
-- lives at least a week more, when every article in it has closed.
local function set_vote(index, article, value, now, week)
  drop_closed(index, now, week)
  if value == '0' then
    redis.call('ZREM', index, article)
  else
    redis.call('ZADD', index, value, article)
  end
  keep_index(index, string.format('%d', week))
end

-- index_vote(index, voter, article, posted, dir, now, week, via_outbox)
-- records the voter's vote (dir: up, down or none). With via_outbox (the
-- cluster layout, when the voter's shard is not the article's), index is
-- the shard's outbox and the vote is queued for the voter's shard (see
-- outbox.rs). Returns what was queued: 'queued', the entry's id, its value
-- and its time, which the write applies on the voter's shard before it
-- answers; nothing when the index was written here.
local function index_vote(index, voter, article, posted, dir, now, week, via_outbox)
  local value = '0'
  if dir == 'up' then value = index_time(posted) end
  if dir == 'down' then value = '-' .. index_time(posted) end
  if via_outbox then
    local at = string.format('%.6f', now)
    local id = redis.call('XADD', index, '*', 'voter', voter, 'article', article, 'vote', value,
      'at', at)
    return {'queued', id, value, at}
  end
  set_vote(index, article, value, now, week)
  return {}
end

-- with_queued(reply, queued): a script's reply, followed by what
-- index_vote queued.
local function with_queued(reply, queued)
  for _, v in ipairs(queued) do reply[#reply + 1] = v end
  return reply
end
