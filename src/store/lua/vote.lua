-- Casts a batch of votes, in order, each as if it were cast alone (see
-- scripts/vote.rs). Needs karma, rate_limit and index_time,
-- and the constants vote.rs binds in front of them (see scripts/mod.rs):
-- the keys by_time, by_score and karma, the site's net-vote rankings
-- top[1..5] (all-time last) and the period names periods[1..5], the
-- prefixes and suffixes article_prefix, voted_prefix, downvoted_prefix,
-- groups_suffix, user_prefix, rate_suffix, votes_suffix,
-- user_score_suffix, user_top_infix, group_prefix, group_top_infix,
-- group_score_prefix and cached_suffix, the channel score_channel, the
-- number week (the voting window in seconds), and what a vote whose net
-- change is n (-2 to 2) adds to score: and to the net-vote rankings,
-- score_moves[n + 3] and top_moves[n + 3] (whole numbers, as text).
--
-- ARGV: [1] [2] the rate limit and its window, then three per vote: the
-- article id, the voter's name, and up, down or none.
-- Answers two values per vote, in order, in one flat list: 'changed',
-- 'same', 'missing' or 'closed' and 0, or 'limited' and the seconds to
-- wait.
--
-- Each vote writes what is its own as it comes: the voter's counter,
-- the voted sets, the hash, score:, the all-time net-vote ranking, the
-- voter's vote index and the event. What votes share is written once for
-- the batch, at the end: the shorter periods' net-vote rankings, karma and
-- the cached rankings, each article and poster once with the batch's
-- outcome. The script is atomic, so no one sees the votes without them; a
-- batch of one makes as many calls as a vote alone did.
local limit, window = tonumber(ARGV[1]), ARGV[2]
local t = redis.call('TIME')
local now = t[1] + t[2] / 1000000
local at = string.format('%s.%s%s', t[1], string.rep('0', 6 - #t[2]), t[2])

-- The batch's articles, each once, with their post times: time: decides
-- the voting window, as in the book.
local members, articles = {}, {}
for i = 3, #ARGV, 3 do
  local article = article_prefix .. ARGV[i]
  if not articles[article] then
    members[#members + 1] = article
    -- Every field named at once: a table grown field by field is resized
    -- at each power of two.
    articles[article] = { time = false, posted = false, score = false, top = false, groups = false, poster = false }
  end
end
local times = redis.call('ZMSCORE', by_time, unpack(members))
for k, article in ipairs(members) do
  local a = articles[article]
  a.time = times[k]
  a.posted = times[k] and times[k] + 0
end

-- A count the hash holds as a plain whole number (no sign but a minus, no
-- leading zero), which the event may carry as it is.
local function whole(text)
  return text == '0' or string.match(text, '^%-?[1-9]%d*') == text
end
-- The event's notified member for 0 to 3 notifications.
local notified = { ',"notified":0', ',"notified":1', ',"notified":2', ',"notified":3' }

-- Karma moved by the batch, by poster.
local karma_moved = {}
-- A voter's vote index is tidied at the voter's first vote of each rate
-- window, whatever that vote's outcome: its closed entries go
-- (drop_closed, lib/index_time.lua), and it is kept for a week
-- and a window, which outlasts every vote the window can add (an index
-- made later in the window gets that lifetime when it is made). The
-- closed entries it holds between two tidyings were open at the last, so
-- it never holds more than its open entries and one window of votes. The
-- lifetime is printed once a batch, when a vote needs it.
local keep
local function lifetime()
  keep = keep or string.format('%d', week + window)
  return keep
end
local function tidy(index)
  drop_closed(index, now, week)
  redis.call('EXPIRE', index, lifetime())
end

-- Each vote in turn; a vote's early answer leaves the loop's body (the
-- break of a repeat that runs once).
local replies = {}
for i = 3, #ARGV, 3 do
  local id, name, dir = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local status, detail = nil, 0
  repeat
    local voter = user_prefix .. name
    local wait, calls = rate_limit(voter .. rate_suffix, limit, window)
    if wait > 0 then status, detail = 'limited', wait break end
    local index = voter .. votes_suffix
    local first = calls == 1
    local article = article_prefix .. id
    local a = articles[article]
    -- An article in time: is derived from the book's keys (lib/derive.lua).
    local derivable = a.time ~= false
    local posted = a.posted
    -- Missing from time: (a restore, a hand edit): the hash's time counts.
    if not derivable then
      posted = redis.call('HGET', article, 'time')
      posted = posted and tonumber(posted)
    end
    -- Not a finite number (NaN is the one value unequal to itself): no post
    -- time, so no article to vote on.
    if not posted or posted ~= posted or math.abs(posted) == math.huge then
      if first then tidy(index) end
      status = 'missing' break
    end
    if now - posted >= week then
      if first then tidy(index) end
      status = 'closed' break
    end
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
    -- The voter's first vote of the window tidies it (see tidy); a later
    -- one that made it anew gives it its lifetime.
    if dir == 'none' then
      redis.call('ZREM', index, article)
    else
      redis.call('ZADD', index, (dir == 'down' and '-' or '') .. index_time(posted), article)
    end
    if first then
      tidy(index)
    elseif dir ~= 'none' and redis.call('TTL', index) == -1 then
      redis.call('EXPIRE', index, lifetime())
    end
    if was == dir then status = 'same' break end
    -- The target set expires when the window closes. It has its expiry
    -- unless this vote made it (the first downvote, or an upvote after the
    -- last upvoter left), which the hash's count of it, 0, tells: only then
    -- is its TTL looked at.
    local dup, ddown = 0, 0
    if was == 'up' then dup = -1 elseif was == 'down' then ddown = -1 end
    if dir == 'up' then dup = dup + 1 elseif dir == 'down' then ddown = ddown + 1 end
    local net = dup - ddown
    -- The counts as text, for the hash and the event: the hash's own text
    -- for one this vote leaves as it was (when it is a plain whole
    -- number), else the moved count printed as an integer ('%d'; a Lua
    -- number passed as it is would be printed as a double, '%.14g').
    -- Printing costs several times the check.
    -- (A plain whole number is read by arithmetic, which parses it once;
    -- tonumber parses twice.)
    local counted_votes, counted_down = h[2] or '0', h[3] or '0'
    local plain_up, plain_down = whole(counted_votes), whole(counted_down)
    local ups, downs = 0, 0
    if dup ~= 0 or not plain_up then
      if plain_up then ups = counted_votes + 0 else ups = tonumber(h[2]) or 0 end
      counted_votes = string.format('%d', ups + dup)
    end
    if ddown ~= 0 or not plain_down then
      if plain_down then downs = counted_down + 0 else downs = tonumber(h[3]) or 0 end
      counted_down = string.format('%d', downs + ddown)
    end
    local expiry = 0
    if target and (target == up and ups or downs) <= 0
        and redis.call('TTL', target) == -1 then
      redis.call('EXPIREAT', target, string.format('%d', posted + week + 1))
      expiry = 1
    end
    -- One write of the hash, both counts and the indexed field, which moves
    -- with this vote: a difference from the sets left by another writer
    -- keeps its size for the deriver to see. (A count written unchanged
    -- costs less than the list that would leave it out.)
    local u, d = string.match(h[4] or '', '^(%d+),(%d+)')
    if u and #u + #d + 1 == #h[4] then
      redis.call('HSET', article, 'votes', counted_votes, 'downvotes', counted_down,
        'indexed', string.format('%d,%d', u + dup, d + ddown))
    else
      redis.call('HSET', article, 'votes', counted_votes, 'downvotes', counted_down)
    end
    -- The groups as the hash keeps them (joined by commas), or the group
    -- set's for an article written by another client.
    if not a.groups then
      a.groups = h[5] or table.concat(redis.call('SMEMBERS', article .. groups_suffix), ',')
      a.poster = h[1] and as_member(h[1], user_prefix)
    end
    local score = redis.call('ZINCRBY', by_score, score_moves[net + 3], article)
    a.score = score
    -- The net-vote rankings hold one value for an article in every period
    -- (net votes * top_step + the post second): the all-time one moves by
    -- whole votes here, and the others take its last value at the end, so
    -- no other reply is a printed double. An article not in the all-time
    -- one was written by another client and is not derived yet: its
    -- derivation counts this vote with the others, karma included (one
    -- missing from time: is never derived: its karma is counted here).
    local value = redis.call('ZADD', top[5], 'XX', 'INCR', top_moves[net + 3], article)
    if value then a.top = value end
    if a.poster and (value or not derivable) then
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
    if string.find(a.groups, '[%c"\\]') then
      local list = {}
      for g in string.gmatch(a.groups, '[^,]+') do list[#list + 1] = g end
      listed = cjson.encode(list)
    elseif a.groups ~= '' then
      listed = '["' .. (string.gsub(a.groups, ',', '","')) .. '"]'
    end
    local own = ''
    if value and derivable then
      local changed = (dir ~= 'none' and 1 or 0) + (was ~= 'none' and 1 or 0)
      own = notified[changed + expiry + 1]
    end
    redis.call('PUBLISH', score_channel, '{"id":"' .. id .. '"' .. ',"score":"' .. score .. '"'
      .. ',"votes":' .. counted_votes .. ',"downvotes":' .. counted_down
      .. ',"at":"' .. at .. '"' .. ',"groups":' .. listed .. own .. '}')
    status = 'changed'
  until true
  replies[#replies + 1] = status
  replies[#replies + 1] = detail
end

-- The other periods' net-vote rankings: each moved article once, one ZADD
-- per period (XX: a period an article has left is not written back).
local moved = {}
for _, article in ipairs(members) do
  local a = articles[article]
  if a.top then
    moved[#moved + 1] = a.top
    moved[#moved + 1] = article
  end
end
if #moved > 0 then
  for p = 1, 4 do redis.call('ZADD', top[p], 'XX', unpack(moved)) end
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
    for g in string.gmatch(a.groups, '[^,]+') do
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
      for g in string.gmatch(a.groups, '[^,]+') do
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
