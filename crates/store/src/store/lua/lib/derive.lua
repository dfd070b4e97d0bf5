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
-- voters the indexes may lack: up to c.budget are indexed here, more are
-- left to the caller, who indexes them in batches.
--
-- Work: c.spent counts the members (groups, voters) an article's
-- derivation went through, so a script stops after c.budget of them.

-- The hash's counts (votes, downvotes) follow the voted sets while they
-- exist, whatever another writer kept in it; once voting has closed the
-- sets expire and the counts stand.
local function counted(votes, downvotes, ups, downs)
  if ups + downs == 0 then return true end
  return tonumber(votes) == ups and (tonumber(downvotes) or 0) == downs
end

-- The groups with a cached ranking (score, time or TOP_*: the marker) the
-- article may be filed in: one EXISTS per c.budget groups when none has.
local function cached_groups(c, groups)
  local found = {}
  for i = 1, #groups, c.budget do
    local last = math.min(i + c.budget - 1, #groups)
    local probe = {}
    for j = i, last do
      local g = groups[j]
      probe[#probe + 1] = c.group_score_prefix .. g
      probe[#probe + 1] = c.group_time_prefix .. g
      probe[#probe + 1] = c.group_prefix .. g .. c.cached_suffix
    end
    if redis.call('EXISTS', unpack(probe)) > 0 then
      for j = i, last do
        local n = 3 * (j - i)
        if redis.call('EXISTS', probe[n + 1], probe[n + 2], probe[n + 3]) > 0 then
          found[#found + 1] = groups[j]
        end
      end
    end
  end
  return found
end

-- Files an article whose net votes moved (or that is new to votegraph,
-- a.old false) in the net-vote rankings, its poster's karma and feed, and
-- the cached rankings of its poster and groups. A cached ranking takes a
-- new member only when it exists (else the next read builds it whole); an
-- old one is moved in place (XX).
local function file_article(c, article, a, article_groups)
  local fresh = not a.old
  local age = c.now - a.t
  local function in_period(p) return p == 5 or age < c.period_secs[p] end
  for p = 1, 4 do
    if in_period(p) then redis.call('ZADD', c.top[p], a.v, article)
    else redis.call('ZREM', c.top[p], article) end
  end
  redis.call('ZADD', c.top[5], a.v, article)
  local delta = a.net
  if not fresh then delta = a.net - math.floor(tonumber(a.old) / c.top_step) end
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
      if in_period(p) then file(key, a.v) else redis.call('ZREM', key, article) end
    end
  end
  local poster = redis.call('HGET', article, 'poster')
  poster = poster and as_member(poster, c.user_prefix)
  if poster then
    add_karma(c.karma, poster, delta, c.now)
    if fresh then redis.call('ZADD', poster .. c.user_time_suffix, a.posted, article) end
    file(poster .. c.user_score_suffix, a.scored)
    file_top(poster .. c.user_top_infix)
  end
  local groups = article_groups()
  c.spent = c.spent + #groups
  for _, g in ipairs(cached_groups(c, groups)) do
    file(c.group_score_prefix .. g, a.scored)
    if fresh then file(c.group_time_prefix .. g, a.posted) end
    file_top(c.group_prefix .. g .. c.group_top_infix)
  end
end

-- Derives article `id`; c.relist[id] rebuilds its group list (its group
-- set changed). Answers 'relisted' (only that: the members are spent),
-- 'absent' (not in the time and score rankings), 'same', 'changed' or
-- 'voters' (changed or not, voters left to index), and whether the hash's
-- counts were rewritten to the sets' sizes.
local function derive_article(c, id)
  local article = c.article_prefix .. id
  -- Articles the deriver names (c.notified) were named by a write to their
  -- voted sets or groups. Every vote of another writer adds a voter, so it
  -- shows as sizes the indexed field does not hold; when it holds them and
  -- the group list is there, the article is as votegraph's own writes left
  -- it: four reads. The sweep checks the rankings too, for writes no
  -- notification names (score: or time: edited by hand).
  if c.relist[id] and redis.call('EXISTS', article) == 1 then
    c.spent = c.spent + list_groups(article, article .. c.groups_suffix)
    if c.spent >= c.budget then return 'relisted', false end
  end
  if c.notified then
    local h = redis.call('HMGET', article, 'indexed', 'votes', 'downvotes')
    if h[1] and redis.call('HEXISTS', article, 'groups') == 1 then
      local ups = redis.call('SCARD', c.voted_prefix .. id)
      local downs = redis.call('SCARD', c.downvoted_prefix .. id)
      if h[1] == ups .. ',' .. downs and counted(h[2], h[3], ups, downs) then
        return 'same'
      end
    end
  end
  local posted = redis.call('ZSCORE', c.by_time, article)
  local scored = redis.call('ZSCORE', c.by_score, article)
  if not posted or not scored then return 'absent', false end
  local t, s = tonumber(posted), tonumber(scored)
  local net = math.floor((s - t) / c.vote_score + 0.5)
  local v = net * c.top_step + math.floor(t)
  local old = redis.call('ZSCORE', c.top[5], article)
  local fresh = not old
  local changed = fresh or tonumber(old) ~= v
  local h = redis.call('HMGET', article, 'indexed', 'votes', 'downvotes')
  local indexed = h[1]
  local listed = redis.call('HEXISTS', article, 'groups') == 1
  local exists = indexed or listed or redis.call('EXISTS', article) == 1
  local groups_key = article .. c.groups_suffix
  local groups = nil
  local function article_groups()
    if not groups then groups = redis.call('SMEMBERS', groups_key) end
    return groups
  end
  if exists and not listed then c.spent = c.spent + list_groups(article, groups_key) end
  local up_key, down_key = c.voted_prefix .. id, c.downvoted_prefix .. id
  local ups, downs = redis.call('SCARD', up_key), redis.call('SCARD', down_key)
  local recounted = exists and not counted(h[2], h[3], ups, downs)
  if recounted then redis.call('HSET', article, 'votes', ups, 'downvotes', downs) end
  local status = 'same'
  if changed then
    status = 'changed'
    file_article(c, article, {t = t, posted = posted, scored = scored, v = v, net = net, old = old},
      article_groups)
  end
  if fresh and changed then
    if c.now - t < c.announce_secs then
      redis.call('PUBLISH', c.posted_channel, cjson.encode({
        id = id, groups = article_groups(), at = posted }))
    end
  elseif changed or recounted then
    local counts = redis.call('HMGET', article, 'votes', 'downvotes')
    redis.call('PUBLISH', c.score_channel, cjson.encode({
      id = id, score = scored, votes = tonumber(counts[1]) or 0,
      downvotes = tonumber(counts[2]) or 0, at = string.format('%.6f', c.now),
      groups = article_groups() }))
  end
  if not exists then return status, recounted end
  local snapshot = ups .. ',' .. downs
  if indexed == snapshot then return status, recounted end
  -- Closed articles leave the vote indexes: nothing to add.
  if c.now - t < c.week then
    if ups + downs > c.budget then return 'voters', recounted end
    c.spent = c.spent + ups + downs
    index_voters(c, article, t, down_key, '-')
    index_voters(c, article, t, up_key, '')
  end
  redis.call('HSET', article, 'indexed', snapshot)
  return status, recounted
end
