-- Shared by the moderation scripts (flag, moderate_article, moderate_user;
-- see scripts/moderation.rs): the keys and names they all take, the log
-- entry each action writes in the same step, taking an article out of
-- every ranking and putting it back, and announcing a user's sessions
-- ended. Needs karma and group_sizes.
--
-- KEYS[1..11] and ARGV[1..35] are the same in those scripts (laid out by
-- scripts/moderation.rs, common); each script's own follow. Keys and
-- prefixes come placed on the script's shard; keys built from a member
-- (the poster's, a user's log) take c.tag first.
local function moderation_context()
  local t = redis.call('TIME')
  return {
    by_score = KEYS[1], by_time = KEYS[2],
    top = {KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]},
    directory = KEYS[8], queue = KEYS[9], last_id = KEYS[10], log = KEYS[11],
    article_prefix = ARGV[1], groups_suffix = ARGV[2], group_prefix = ARGV[3],
    mirror_suffix = ARGV[4], group_score_prefix = ARGV[5], group_time_prefix = ARGV[6],
    group_top_infix = ARGV[7], user_prefix = ARGV[8], user_time_suffix = ARGV[9],
    user_score_suffix = ARGV[10], user_top_infix = ARGV[11], user_out_suffix = ARGV[12],
    entry_prefix = ARGV[13], action_prefix = ARGV[14], log_suffix = ARGV[15],
    max_entries = tonumber(ARGV[16]), channel = ARGV[17],
    vote_score = tonumber(ARGV[18]), top_step = tonumber(ARGV[19]),
    period_names = {ARGV[20], ARGV[21], ARGV[22], ARGV[23], ARGV[24]},
    period_secs = {tonumber(ARGV[25]), tonumber(ARGV[26]), tonumber(ARGV[27]), tonumber(ARGV[28])},
    actor = ARGV[29], reason = ARGV[30], trim = tonumber(ARGV[31]),
    tag = ARGV[32], via_outbox = ARGV[33] == '1',
    shards = tonumber(ARGV[34]), shard = tonumber(ARGV[35]),
    now = tonumber(t[1]) + tonumber(t[2]) / 1000000,
    ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000),
  }
end

-- The next entry number: on one primary, the counter's next. Over shards,
-- each shard's count runs at least with the clock's millisecond, times
-- c.shards plus the shard: unique, and newer entries of any shard number
-- higher (to the primaries' clock skew).
local function next_entry(c)
  if c.shards == 1 then return redis.call('INCR', c.last_id) end
  local n = math.max((tonumber(redis.call('GET', c.last_id)) or 0) + 1, c.ms)
  redis.call('SET', c.last_id, string.format('%.0f', n))
  return string.format('%.0f', n * c.shards + c.shard)
end

-- log_entry(c, e) appends entry number n to the log: e.action, filed in
-- the action's index e.index and the article's or user's log e.subject;
-- e.moderator, e.article, e.user and e.ends (a ban's end) when given, and
-- c.reason. Then the oldest entries go (at most c.trim per call) until the
-- log holds c.max_entries.
local function log_entry(c, e)
  local n = next_entry(c)
  local fields = {'at', string.format('%.6f', c.now), 'action', e.action}
  local optional = {moderator = e.moderator, article = e.article, user = e.user,
    ['until'] = e.ends, reason = c.reason}
  for field, value in pairs(optional) do
    if value ~= '' then
      fields[#fields + 1] = field
      fields[#fields + 1] = value
    end
  end
  redis.call('HSET', c.entry_prefix .. n, unpack(fields))
  for _, key in ipairs({c.log, e.index, e.subject}) do redis.call('ZADD', key, n, n) end
  for _ = 1, c.trim do
    if redis.call('ZCARD', c.log) <= c.max_entries then break end
    local old = redis.call('ZPOPMIN', c.log)[1]
    local entry = c.entry_prefix .. old
    local f = redis.call('HMGET', entry, 'action', 'article', 'user')
    redis.call('ZREM', c.action_prefix .. f[1], old)
    if f[2] then redis.call('ZREM', c.article_prefix .. f[2] .. c.log_suffix, old) end
    if f[3] then redis.call('ZREM', c.tag .. c.user_prefix .. f[3] .. c.log_suffix, old) end
    redis.call('DEL', entry)
  end
end

-- Drops an owner's cached rankings: its net-vote ones (top_prefix and a
-- period name) and the others named; the next read builds them again.
local function drop_rankings(c, top_prefix, ...)
  redis.call('DEL', ...)
  for _, p in ipairs(c.period_names) do redis.call('DEL', top_prefix .. p) end
end

-- take_out(c, id, groups) takes article <id> out of every ranking and
-- order: the site's, its groups' (sets, mirrors, directory counts, cached
-- rankings) and its poster's (moved to their out set). Its score stays in
-- the hash, its group set as it is, both for put_back.
local function take_out(c, id, groups)
  local article = c.article_prefix .. id
  local h = redis.call('HMGET', article, 'time', 'votes', 'downvotes', 'poster')
  local t = tonumber(h[1]) or 0
  local score = redis.call('ZSCORE', c.by_score, article)
    or t + c.vote_score * ((tonumber(h[2]) or 0) - (tonumber(h[3]) or 0))
  redis.call('HSET', article, 'removed_score', score)
  redis.call('ZREM', c.by_score, article)
  redis.call('ZREM', c.by_time, article)
  for _, key in ipairs(c.top) do redis.call('ZREM', key, article) end
  for _, g in ipairs(groups) do
    local group = c.group_prefix .. g
    if redis.call('SREM', group, article) == 1 then
      resize_group(c.directory, g, -1, c.via_outbox)
    end
    redis.call('SREM', group .. c.mirror_suffix, article)
    drop_rankings(c, group .. c.group_top_infix, c.group_score_prefix .. g, c.group_time_prefix .. g)
  end
  if h[4] then
    local poster = c.tag .. as_member(h[4], c.user_prefix)
    redis.call('ZREM', poster .. c.user_time_suffix, article)
    redis.call('ZADD', poster .. c.user_out_suffix, t, article)
    drop_rankings(c, poster .. c.user_top_infix, poster .. c.user_score_suffix)
  end
end

-- put_back(c, id, groups) files article <id> again wherever take_out took
-- it from, with the score it had; its net votes and periods follow from
-- that score and its post time, as the deriver computes them.
local function put_back(c, id, groups)
  local article = c.article_prefix .. id
  local h = redis.call('HMGET', article, 'time', 'removed_score', 'poster')
  local posted = h[1] or '0'
  local t = tonumber(posted) or 0
  local score = h[2] or posted
  redis.call('ZADD', c.by_score, score, article)
  redis.call('ZADD', c.by_time, posted, article)
  local net = math.floor((tonumber(score) - t) / c.vote_score + 0.5)
  local top = string.format('%.0f', net * c.top_step + math.floor(t))
  for p = 1, 5 do
    if p == 5 or c.now - t < c.period_secs[p] then redis.call('ZADD', c.top[p], top, article) end
  end
  for _, g in ipairs(groups) do
    local group = c.group_prefix .. g
    if redis.call('SADD', group, article) == 1 then resize_group(c.directory, g, 1, c.via_outbox) end
    redis.call('SADD', group .. c.mirror_suffix, article)
    drop_rankings(c, group .. c.group_top_infix, c.group_score_prefix .. g, c.group_time_prefix .. g)
  end
  if h[3] then
    local poster = c.tag .. as_member(h[3], c.user_prefix)
    redis.call('ZREM', poster .. c.user_out_suffix, article)
    redis.call('ZADD', poster .. c.user_time_suffix, posted, article)
    drop_rankings(c, poster .. c.user_top_infix, poster .. c.user_score_suffix)
  end
  redis.call('HDEL', article, 'removed_score')
end

-- Tells every instance (their cached responses) and articleRemoved.
local function announce(c, event)
  redis.call('PUBLISH', c.channel, cjson.encode(event))
end

-- announce_sessions(set, prefix, channel): announces every live session
-- of the set (token hashes) on the channel as ended; dead ones leave the
-- set.
local function announce_sessions(set, prefix, channel)
  for _, hash in ipairs(redis.call('SMEMBERS', set)) do
    if redis.call('EXISTS', prefix .. hash) == 1 then
      redis.call('PUBLISH', channel, hash)
    else
      redis.call('SREM', set, hash)
    end
  end
end
