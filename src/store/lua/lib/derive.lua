-- Shared by the scripts that follow writes made outside votegraph
-- (derive_articles, for the deriver and the sweep): re-derives everything
-- votegraph keeps about one article from the book's keys, writing only
-- what differs, so an article already right costs a handful of reads and
-- no write (votegraph's own writes keep it right, and so do other
-- instances that derived it first). Needs karma and group_list.
--
-- c is the configuration table the script builds from its ARGV (prefixes,
-- suffixes, channels and numbers; see derive_articles.lua), with c.now and
-- the keys c.by_time, c.by_score, c.karma and c.top[1..5] (all-time last).
--
-- The net votes are (score: - time:) / vote_score, rounded; the net-vote
-- value is net * top_step + the whole post second. An article missing from
-- the all-time ranking is new to votegraph (posted by the book's code, or
-- restored): it is filed in its poster's feeds (the cached ones only when
-- they exist), counted in the poster's karma and announced when it is
-- recent. One already there whose value
-- moved was voted on outside votegraph: its rankings, the cached rankings
-- of its groups and poster, and karma move by the difference, and the
-- change is announced like a vote.
--
-- The voters: the hash's indexed field holds the sizes of the voted sets
-- (up,down) the vote indexes were last made to match; the vote script
-- moves it with its own vote only when it matched. A difference means
-- voters the indexes may lack: up to c.inline_voters are indexed here,
-- more are left to the caller, who indexes them in batches.
--
-- Answers 'absent' (not in the time and score rankings), 'same',
-- 'changed' or 'voters' (changed or not, voters left to index).
local function derive_article(c, id)
  local article = c.article_prefix .. id
  -- Articles the deriver names (c.notified) were named by a write to their
  -- voted sets or groups. Every vote of another writer adds a voter, so it
  -- shows as sizes the indexed field does not hold; when it holds them and
  -- the group list is there, the article is as votegraph's own writes left
  -- it: four reads. The sweep checks the rankings too, for writes no
  -- notification names (score: or time: edited by hand).
  if c.notified then
    local indexed = redis.call('HGET', article, 'indexed')
    if indexed and redis.call('HEXISTS', article, 'groups') == 1 then
      local ups = redis.call('SCARD', c.voted_prefix .. id)
      if indexed == ups .. ',' .. redis.call('SCARD', c.downvoted_prefix .. id) then
        return 'same'
      end
    end
  end
  local posted = redis.call('ZSCORE', c.by_time, article)
  local scored = redis.call('ZSCORE', c.by_score, article)
  if not posted or not scored then return 'absent' end
  local t, s = tonumber(posted), tonumber(scored)
  local net = math.floor((s - t) / c.vote_score + 0.5)
  local v = net * c.top_step + math.floor(t)
  local old = redis.call('ZSCORE', c.top[5], article)
  local fresh = not old
  local changed = fresh or tonumber(old) ~= v
  -- Two reads of the hash on the common path (nothing to do).
  local indexed = redis.call('HGET', article, 'indexed')
  local listed = redis.call('HEXISTS', article, 'groups') == 1
  local exists = indexed or listed or redis.call('EXISTS', article) == 1
  local groups_key = article .. c.groups_suffix
  local groups = nil
  local function article_groups()
    if not groups then groups = redis.call('SMEMBERS', groups_key) end
    return groups
  end
  if exists and not listed then list_groups(article, groups_key) end
  local status = 'same'
  if changed then
    status = 'changed'
    local age = c.now - t
    local function in_period(p) return p == 5 or age < c.period_secs[p] end
    for p = 1, 4 do
      if in_period(p) then redis.call('ZADD', c.top[p], v, article)
      else redis.call('ZREM', c.top[p], article) end
    end
    redis.call('ZADD', c.top[5], v, article)
    local delta = net
    if not fresh then delta = net - math.floor(tonumber(old) / c.top_step) end
    local poster = redis.call('HGET', article, 'poster')
    poster = poster and as_member(poster, c.user_prefix)
    -- A cached ranking takes a new member only when it exists (else the
    -- next read builds it whole); an old one is moved in place (XX).
    local function file(key, value)
      if fresh then
        if redis.call('EXISTS', key) == 1 then redis.call('ZADD', key, value, article) end
      else
        redis.call('ZADD', key, 'XX', value, article)
      end
    end
    local function file_top(prefix)
      for p = 1, 5 do
        local key = prefix .. c.period_names[p]
        if in_period(p) then file(key, v) else redis.call('ZREM', key, article) end
      end
    end
    if poster then
      add_karma(c.karma, poster, delta, c.now)
      if fresh then redis.call('ZADD', poster .. c.user_time_suffix, posted, article) end
      file(poster .. c.user_score_suffix, scored)
      file_top(poster .. c.user_top_infix)
    end
    for _, g in ipairs(article_groups()) do
      file(c.group_score_prefix .. g, scored)
      if fresh then file(c.group_time_prefix .. g, posted) end
      file_top(c.group_prefix .. g .. c.group_top_infix)
    end
    if fresh then
      if age < c.announce_secs then
        redis.call('PUBLISH', c.posted_channel, cjson.encode({
          id = id, groups = article_groups(), at = posted }))
      end
    else
      local counts = redis.call('HMGET', article, 'votes', 'downvotes')
      redis.call('PUBLISH', c.score_channel, cjson.encode({
        id = id, score = scored, votes = tonumber(counts[1]) or 0,
        downvotes = tonumber(counts[2]) or 0, at = string.format('%.6f', c.now),
        groups = article_groups() }))
    end
  end
  if not exists then return status end
  local up_key, down_key = c.voted_prefix .. id, c.downvoted_prefix .. id
  local ups, downs = redis.call('SCARD', up_key), redis.call('SCARD', down_key)
  local snapshot = ups .. ',' .. downs
  if indexed == snapshot then return status end
  -- Closed articles leave the vote indexes: nothing to add.
  if c.now - t < c.week then
    if ups + downs > c.inline_voters then return 'voters' end
    index_voters(c, article, t, down_key, '-')
    index_voters(c, article, t, up_key, '')
  end
  redis.call('HSET', article, 'indexed', snapshot)
  return status
end
