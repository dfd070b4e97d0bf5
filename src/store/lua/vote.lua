-- Sets a voter's vote (see scripts/vote.rs). Needs karma, rate_limit and
-- vote_index.
--
-- KEYS: [1] the voter's vote counter, [2] the article, [3] the time
-- ranking, [4] the score ranking, [5] the upvoters, [6] the downvoters,
-- [7] the article's groups, [8] karma, [9] the voter's vote index,
-- [10..14] the net-vote rankings of the site, one per period.
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

local was = 'none'
if redis.call('SISMEMBER', up, voter) == 1 then was = 'up'
elseif redis.call('SISMEMBER', down, voter) == 1 then was = 'down' end
-- The index follows the sets in every outcome, so a vote the sets hold
-- but the index does not (cast by the book's code) is indexed by the
-- voter's next vote on the article, even an unchanged one.
index_vote(my_votes, article, posted, dir, now, week)
if was == dir then
  return {'same', was, redis.call('ZSCORE', by_score, article)}
end

local dup, ddown = 0, 0
if was == 'up' then dup = -1 elseif was == 'down' then ddown = -1 end
if dir == 'up' then dup = dup + 1 elseif dir == 'down' then ddown = ddown + 1 end
local target = nil
if dir == 'up' then target = up elseif dir == 'down' then target = down end
-- The hash's indexed field (see lib/derive.lua) follows this vote only
-- when it matched the sets before it: a difference left by another
-- writer stays for the deriver to see.
local indexed = redis.call('SCARD', up) .. ',' .. redis.call('SCARD', down)
if was == 'none' then
  redis.call('SADD', target, voter)
elseif dir == 'none' then
  redis.call('SREM', was == 'up' and up or down, voter)
else
  redis.call('SMOVE', was == 'up' and up or down, target, voter)
end
if target and redis.call('TTL', target) == -1 then
  redis.call('EXPIREAT', target, math.floor(posted + week) + 1)
end
if redis.call('HGET', article, 'indexed') == indexed then
  redis.call('HSET', article, 'indexed', redis.call('SCARD', up) .. ',' .. redis.call('SCARD', down))
end
if dup ~= 0 then redis.call('HINCRBY', article, 'votes', dup) end
if ddown ~= 0 then redis.call('HINCRBY', article, 'downvotes', ddown) end
local score = redis.call('ZINCRBY', by_score, vote_score * (dup - ddown), article)
-- The net-vote rankings (KEYS[10..14] and the cached ones of the poster
-- and the groups, where they exist) move by whole votes. An article not in
-- the all-time one was written by another client and is not derived yet:
-- its derivation counts this vote with the others, karma included (one
-- missing from time: is never derived: its karma is counted here).
local step = (dup - ddown) * top_step
for k = 10, 13 do redis.call('ZADD', KEYS[k], 'XX', 'INCR', step, article) end
local derived = redis.call('ZADD', KEYS[14], 'XX', 'INCR', step, article)
local poster = redis.call('HGET', article, 'poster')
if poster then
  poster = as_member(poster, user_prefix)
  if derived or not derivable then add_karma(karma, poster, dup - ddown, now) end
  redis.call('ZADD', poster .. mine_score_suffix, 'XX', score, article)
end
local groups = redis.call('SMEMBERS', groups_key)
for _, g in ipairs(groups) do
  redis.call('ZADD', group_score_prefix .. g, 'XX', score, article)
end
local group_prefix, group_top, user_top = ARGV[10], ARGV[11], ARGV[12]
for p = first_period, #ARGV do
  if poster then redis.call('ZADD', poster .. user_top .. ARGV[p], 'XX', 'INCR', step, article) end
  for _, g in ipairs(groups) do
    redis.call('ZADD', group_prefix .. g .. group_top .. ARGV[p], 'XX', 'INCR', step, article)
  end
end
local counts = redis.call('HMGET', article, 'votes', 'downvotes')
-- cjson prints numbers with 14 digits; score and time go as exact strings.
redis.call('PUBLISH', channel, cjson.encode({
  id = id, score = score, votes = tonumber(counts[1]) or 0,
  downvotes = tonumber(counts[2]) or 0, at = string.format('%.6f', now), groups = groups }))
return {'changed', was, score}
