-- Sets a voter's vote (see scripts/vote.rs). Needs karma, rate_limit and
-- vote_index.
--
-- KEYS: [1] the voter's vote counter, [2] the article, [3] the time
-- ranking, [4] the score ranking, [5] the upvoters, [6] the downvoters,
-- [7] the article's groups (read only when the hash lacks its copy),
-- [8] karma, [9] the voter's vote index, [10..14] the net-vote rankings
-- of the site, one per period.
-- ARGV: [1] the article id, [2] the voter's member, [3] up, down or none,
-- [4] [5] the rate limit and its window, [6] the user prefix, [7] the
-- suffix of a user's score ranking, [8] the prefix of a group's score
-- ranking, [9] the channel of score changes, [10] the group prefix,
-- [11] [12] the infixes of a group's and a user's net-vote rankings,
-- [13] the voting window in seconds, [14] a vote's score, [15] the
-- net-vote step, [16..] the period names.
local rate, article, by_time, by_score, up, down, groups_key, karma, my_votes =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local id, voter, dir = ARGV[1], ARGV[2], ARGV[3]
local user_prefix, mine_score_suffix, group_score_prefix, channel = ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local week, vote_score, top_step = tonumber(ARGV[13]), tonumber(ARGV[14]), tonumber(ARGV[15])
local first_period = 16
local wait = rate_limit(rate, ARGV[4], ARGV[5])
if wait > 0 then return {'limited', wait} end
local posted = redis.call('ZSCORE', by_time, article)
-- An article in time: is derived from the book's keys (lib/derive.lua).
local derivable = posted ~= false
if not posted then
  if redis.call('EXISTS', article) == 0 then return {'missing'} end
  posted = redis.call('HGET', article, 'time')
end
posted = tonumber(posted)
if not posted then return {'missing'} end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
if now - posted >= week then return {'closed'} end

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
index_vote(my_votes, article, posted, dir, now, week)
if was == dir then
  return {'same', was, redis.call('ZSCORE', by_score, article)}
end
if target and redis.call('TTL', target) == -1 then
  redis.call('EXPIREAT', target, math.floor(posted + week) + 1)
end

local dup, ddown = 0, 0
if was == 'up' then dup = -1 elseif was == 'down' then ddown = -1 end
if dir == 'up' then dup = dup + 1 elseif dir == 'down' then ddown = ddown + 1 end
-- One read and one write of the hash. Its indexed field (see
-- lib/derive.lua) moves with this vote: a difference from the sets left
-- by another writer keeps its size for the deriver to see. Its groups
-- field (the article's groups, kept by post, setGroups and the deriver)
-- names the cached group rankings and goes out with the event.
local h = redis.call('HMGET', article, 'poster', 'votes', 'downvotes', 'indexed', 'groups')
local votes, downvotes = (tonumber(h[2]) or 0) + dup, (tonumber(h[3]) or 0) + ddown
-- Counts are printed as integers ('%d'): a Lua number passed as it is
-- would be printed as a double ('%.17g'), several times the work.
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
local groups = {}
if h[5] then
  for g in string.gmatch(h[5], '[^,]+') do groups[#groups + 1] = g end
else
  groups = redis.call('SMEMBERS', groups_key)
end
local score = redis.call('ZINCRBY', by_score, tostring(vote_score * (dup - ddown)), article)
-- The net-vote rankings (KEYS[10..14]) move by whole votes. An article not
-- in the all-time one was written by another client and is not derived
-- yet: its derivation counts this vote with the others, karma included
-- (one missing from time: is never derived: its karma is counted here).
-- (Numbers passed to redis.call are printed anew by each call: the step
-- is printed once.)
local step = tostring((dup - ddown) * top_step)
for k = 10, 13 do redis.call('ZADD', KEYS[k], 'XX', 'INCR', step, article) end
local derived = redis.call('ZADD', KEYS[14], 'XX', 'INCR', step, article)
local poster = h[1] and as_member(h[1], user_prefix)
if poster then
  if derived or not derivable then add_karma(karma, poster, dup - ddown, now) end
  redis.call('ZADD', poster .. mine_score_suffix, 'XX', score, article)
end
-- The cached rankings of the poster and the groups (60 s caches, built by
-- reads) exist only while someone reads them: one EXISTS finds whether
-- any does before moving them in place.
local group_prefix, group_top, user_top = ARGV[10], ARGV[11], ARGV[12]
local names = {}
for _, g in ipairs(groups) do
  names[#names + 1] = group_score_prefix .. g
  for p = first_period, #ARGV do names[#names + 1] = group_prefix .. g .. group_top .. ARGV[p] end
end
if poster then
  for p = first_period, #ARGV do names[#names + 1] = poster .. user_top .. ARGV[p] end
end
-- In the order named: per group its score ranking then one per period,
-- then the poster's, one per period.
if #names > 0 and redis.call('EXISTS', unpack(names)) > 0 then
  local periods = #ARGV - first_period + 1
  for i, name in ipairs(names) do
    local per_group = (i - 1) % (periods + 1)
    if i <= #groups * (periods + 1) and per_group == 0 then
      redis.call('ZADD', name, 'XX', score, article)
    else
      redis.call('ZADD', name, 'XX', 'INCR', step, article)
    end
  end
end
-- cjson prints numbers with 14 digits; score and time go as exact strings.
redis.call('PUBLISH', channel, cjson.encode({
  id = id, score = score, votes = votes, downvotes = downvotes,
  at = string.format('%.6f', now), groups = groups }))
return {'changed', was, score}
