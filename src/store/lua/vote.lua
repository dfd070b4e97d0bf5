-- Casts a batch of votes, in order, each as if it were cast alone (see
-- scripts/vote.rs). Needs karma, rate_limit, index_time and vote_index,
-- and the constants vote.rs binds in front of them (see scripts/mod.rs):
-- the keys by_time, by_score and karma, the site's net-vote rankings
-- top[1..5] (all-time last) and the period names periods[1..5], the
-- prefixes and suffixes article_prefix, voted_prefix, downvoted_prefix,
-- groups_suffix, user_prefix, rate_suffix, votes_suffix,
-- user_score_suffix, user_top_infix, group_prefix, group_top_infix,
-- group_score_prefix and cached_suffix, the channel score_channel, and the
-- numbers week (the voting window in seconds), vote_score and top_step
-- (both whole).
--
-- ARGV: [1] [2] the rate limit and its window, then three per vote: the
-- article id, the voter's name, and up, down or none.
-- Answers two values per vote, in order, in one flat list: 'changed',
-- 'same', 'missing' or 'closed' and 0; 'limited' and the seconds to wait;
-- or 'failed' and the message of a Redis call that refused the vote (a
-- key of another type, written by hand), which leaves the others alone.
--
-- Each vote writes what is its own as it comes: the voter's counter,
-- the voted sets, the hash, score:, the voter's vote index and the event.
-- What votes share is written once for the batch, at the end: the
-- net-vote rankings, karma and the cached rankings, each article and
-- poster once with the batch's sum. The script is atomic, so no one sees
-- the votes without them; a batch of one costs what one vote did.
local limit, window = ARGV[1], ARGV[2]
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local at = string.format('%s.%s%s', t[1], string.rep('0', 6 - #t[2]), t[2])

-- The batch's articles, each once: time: decides the voting window, as in
-- the book, and the all-time net-vote ranking holds the derived ones (see
-- lib/derive.lua) with their value (net votes * top_step + the post
-- second, the same in every period).
local members, articles = {}, {}
for i = 3, #ARGV, 3 do
  local article = article_prefix .. ARGV[i]
  if not articles[article] then
    members[#members + 1] = article
    -- Every field named at once: a table grown field by field is resized
    -- at each power of two.
    articles[article] = {
      net = 0, time = false, value = false, score = false, top = false,
      groups = false, poster = false,
    }
  end
end
local times = redis.call('ZMSCORE', by_time, unpack(members))
local values = redis.call('ZMSCORE', top[5], unpack(members))
for k, article in ipairs(members) do
  articles[article].time = times[k]
  articles[article].value = values[k] and tonumber(values[k])
end

-- Karma moved by the batch, by poster.
local karma_moved = {}

local function cast(id, name, dir)
  local voter = user_prefix .. name
  local wait = rate_limit(voter .. rate_suffix, limit, window)
  if wait > 0 then return 'limited', wait end
  local article = article_prefix .. id
  local a = articles[article]
  -- An article in time: is derived from the book's keys (lib/derive.lua).
  local derivable = a.time ~= false
  local posted = a.time
  -- Missing from time: (a restore, a hand edit): the hash's time counts.
  if not derivable then posted = redis.call('HGET', article, 'time') end
  posted = posted and tonumber(posted)
  -- Not a finite number (NaN is the one value unequal to itself): no post
  -- time, so no article to vote on.
  if not posted or posted ~= posted or math.abs(posted) == math.huge then return 'missing', 0 end
  if now - posted >= week then return 'closed', 0 end
  -- One read of the hash serves the rest of the vote: the poster, the
  -- counts, the indexed field (see lib/derive.lua) and the groups (the
  -- copy of the group set kept by post, setGroups and the deriver).
  local h = redis.call('HMGET', article, 'poster', 'votes', 'downvotes', 'indexed', 'groups')
  local up, down = voted_prefix .. id, downvoted_prefix .. id

  -- The voted sets decide the previous direction, and the one write that
  -- records the new one tells it: a voter the target set already held
  -- voted so before (nothing is written); otherwise the other set's SREM
  -- says whether this is a switch. Two commands for any vote.
  local was = 'none'
  local target = nil
  if dir == 'none' then
    if redis.call('SREM', up, voter) == 1 then was = 'up'
    elseif redis.call('SREM', down, voter) == 1 then was = 'down' end
  else
    target = dir == 'up' and up or down
    if redis.call('SADD', target, voter) == 0 then was = dir
    elseif redis.call('SREM', dir == 'up' and down or up, voter) == 1 then
      was = dir == 'up' and 'down' or 'up'
    end
  end
  -- The index follows the sets in every outcome, so a vote the sets hold
  -- but the index does not (cast by the book's code) is indexed by the
  -- voter's next vote on the article, even an unchanged one.
  index_vote(voter .. votes_suffix, article, posted, dir, now, week)
  if was == dir then return 'same', 0 end
  -- The target set expires when the window closes. It has its expiry
  -- unless this vote made it (the first downvote, or an upvote after the
  -- last upvoter left), which the hash's count of it, 0, tells: only then
  -- is its TTL looked at.
  local expiry = 0
  if target and (tonumber(h[target == up and 2 or 3]) or 0) <= 0
      and redis.call('TTL', target) == -1 then
    redis.call('EXPIREAT', target, string.format('%d', posted + week + 1))
    expiry = 1
  end

  local dup, ddown = 0, 0
  if was == 'up' then dup = -1 elseif was == 'down' then ddown = -1 end
  if dir == 'up' then dup = dup + 1 elseif dir == 'down' then ddown = ddown + 1 end
  local net = dup - ddown
  -- One write of the hash. Its indexed field moves with this vote: a
  -- difference from the sets left by another writer keeps its size for
  -- the deriver to see. Numbers are printed as integers ('%d'): a Lua
  -- number passed as it is would be printed as a double ('%.14g'), several
  -- times the work.
  local votes, downvotes = (tonumber(h[2]) or 0) + dup, (tonumber(h[3]) or 0) + ddown
  local fields = {}
  if dup ~= 0 then fields = {'votes', string.format('%d', votes)} end
  if ddown ~= 0 then
    fields[#fields + 1] = 'downvotes'
    fields[#fields + 1] = string.format('%d', downvotes)
  end
  local comma = h[4] and string.find(h[4], ',', 1, true)
  if comma then
    local u, d = tonumber(string.sub(h[4], 1, comma - 1)), tonumber(string.sub(h[4], comma + 1))
    if u and d then
      fields[#fields + 1] = 'indexed'
      fields[#fields + 1] = string.format('%d,%d', u + dup, d + ddown)
    end
  end
  redis.call('HSET', article, unpack(fields))
  if not a.groups then
    local groups = {}
    if h[5] then
      for g in string.gmatch(h[5], '[^,]+') do groups[#groups + 1] = g end
    else
      groups = redis.call('SMEMBERS', article .. groups_suffix)
    end
    a.groups = groups
    a.poster = h[1] and as_member(h[1], user_prefix)
  end
  local score = redis.call('ZINCRBY', by_score, string.format('%d', vote_score * net), article)
  a.score = score
  -- The rankings of a derived article move at the end by the batch's net
  -- votes. One not in the all-time ranking was written by another client
  -- and is not derived yet: its derivation counts this vote with the
  -- others, karma included (one missing from time: is never derived: its
  -- karma is counted here).
  a.net = a.net + net
  if a.poster and (a.value or not derivable) then
    karma_moved[a.poster] = (karma_moved[a.poster] or 0) + net
  end

  -- The event is written out rather than by cjson (which prints numbers
  -- as doubles, with 14 digits): the id is digits, the score as Redis
  -- printed it, the time from TIME's own digits, and the groups as they
  -- are unless one holds a quote, a backslash or a control character.
  -- For an article this vote leaves derived (in time: and the all-time
  -- ranking), it says how many notifications the vote raised on the voted
  -- sets: one per set it changed (the set it joined, the set it left) and
  -- one for an expiry. The deriver, which receives them just before this
  -- event, then has nothing to derive (see deriver.rs, OwnWrites).
  local listed = '[]'
  if #a.groups > 0 then
    listed = '["' .. table.concat(a.groups, '","') .. '"]'
    for _, g in ipairs(a.groups) do
      if string.find(g, '[%c"\\]') then listed = cjson.encode(a.groups) break end
    end
  end
  local own = ''
  if a.value and derivable then
    local changed = (dir ~= 'none' and 1 or 0) + (was ~= 'none' and 1 or 0)
    own = string.format(',"notified":%d', changed + expiry)
  end
  redis.call('PUBLISH', score_channel, string.format(
    '{"id":"%s","score":"%s","votes":%d,"downvotes":%d,"at":"%s","groups":%s%s}',
    id, score, votes, downvotes, at, listed, own))
  return 'changed', 0
end

local replies = {}
for i = 3, #ARGV, 3 do
  local ok, status, detail = pcall(cast, ARGV[i], ARGV[i + 1], ARGV[i + 2])
  if not ok then
    status, detail = 'failed', type(status) == 'table' and status.err or tostring(status)
  end
  replies[#replies + 1] = status
  replies[#replies + 1] = detail
end

-- The net-vote rankings: each moved article once, one ZADD per period
-- (XX: a period an article has left is not written back).
local moved = {}
for _, article in ipairs(members) do
  local a = articles[article]
  if a.value and a.net ~= 0 then
    a.value = a.value + a.net * top_step
    a.top = string.format('%d', a.value)
    moved[#moved + 1] = a.top
    moved[#moved + 1] = article
  end
end
if #moved > 0 then
  for p = 1, 5 do redis.call('ZADD', top[p], 'XX', unpack(moved)) end
end
-- Karma, each poster once (a ZSCORE and a ZADD: a batch seldom holds
-- several posters' articles, and lists would cost the script more than
-- the calls they save).
for poster, delta in pairs(karma_moved) do add_karma(karma, poster, delta, now) end

-- The cached rankings of the posters and the groups (60 s caches, built
-- by reads) exist only while someone reads them: one EXISTS over each
-- group's score ranking (the book builds it too) and the markers the feed
-- script sets with each ranking of a user's or TOP_* ranking of a group's
-- it builds (see keys.rs, group_cached) finds whether any may; only then
-- are they named and moved in place (a missing one is left missing). The
-- poster's score ranking is one of them: a small sorted set is a
-- listpack, where moving one member reads every score before its new
-- place as text, which cost a vote more than all its other rankings
-- together.
local probe = {}
for _, article in ipairs(members) do
  local a = articles[article]
  if a.score then
    for _, g in ipairs(a.groups) do
      probe[#probe + 1] = group_score_prefix .. g
      probe[#probe + 1] = group_prefix .. g .. cached_suffix
    end
    if a.poster then probe[#probe + 1] = a.poster .. cached_suffix end
  end
end
if #probe > 0 and redis.call('EXISTS', unpack(probe)) > 0 then
  for _, article in ipairs(members) do
    local a = articles[article]
    if a.score then
      local tops = {}
      for _, g in ipairs(a.groups) do
        redis.call('ZADD', group_score_prefix .. g, 'XX', a.score, article)
        tops[#tops + 1] = group_prefix .. g .. group_top_infix
      end
      if a.poster then
        redis.call('ZADD', a.poster .. user_score_suffix, 'XX', a.score, article)
        tops[#tops + 1] = a.poster .. user_top_infix
      end
      if a.top then
        for _, prefix in ipairs(tops) do
          for p = 1, 5 do redis.call('ZADD', prefix .. periods[p], 'XX', a.top, article) end
        end
      end
    end
  end
end
return replies
