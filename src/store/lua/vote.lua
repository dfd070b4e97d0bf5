-- Sets a voter's vote (see scripts/vote.rs). Needs karma, rate_limit,
-- index_time and vote_index, and the constants vote.rs binds in front of them (see
-- scripts/mod.rs): the keys by_time, by_score and karma, the site's
-- net-vote rankings top[1..5] (all-time last) and the period names
-- periods[1..5], the prefixes and suffixes user_prefix, user_score_suffix,
-- user_top_infix, group_prefix, group_top_infix, group_score_prefix and
-- cached_suffix, the channel score_channel, and the numbers week (the
-- voting window in seconds), vote_score and top_step (both whole).
--
-- KEYS: [1] the voter's vote counter, [2] the article, [3] the upvoters,
-- [4] the downvoters, [5] the article's groups (read only when the hash
-- lacks its copy), [6] the voter's vote index.
-- ARGV: [1] the article id, [2] the voter's member, [3] up, down or none,
-- [4] [5] the rate limit and its window.
local rate, article, up, down, groups_key, my_votes =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local id, voter, dir = ARGV[1], ARGV[2], ARGV[3]
local wait = rate_limit(rate, ARGV[4], ARGV[5])
if wait > 0 then return {'limited', wait} end
-- time: decides the voting window, as in the book. One read of the hash
-- serves the rest of the vote: the poster, the counts, the indexed field
-- (see lib/derive.lua) and the groups (the copy of the group set kept by
-- post, setGroups and the deriver).
local posted = redis.call('ZSCORE', by_time, article)
-- An article in time: is derived from the book's keys (lib/derive.lua).
local derivable = posted ~= false
-- Missing from time: (a restore, a hand edit): the hash's time counts.
if not derivable then posted = redis.call('HGET', article, 'time') end
posted = posted and tonumber(posted)
-- Not a finite number (NaN is the one value unequal to itself): no post
-- time, so no article to vote on.
if not posted or posted ~= posted or math.abs(posted) == math.huge then return {'missing'} end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
if now - posted >= week then return {'closed'} end
local h = redis.call('HMGET', article, 'poster', 'votes', 'downvotes', 'indexed', 'groups')

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
-- The target set expires when the window closes. It has its expiry
-- unless this vote made it (the first downvote, or an upvote after the
-- last upvoter left), which the hash's count of it, 0, tells: only then is
-- its TTL looked at.
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
-- difference from the sets left by another writer keeps its size for the
-- deriver to see. Numbers are printed as integers ('%d'): a Lua number
-- passed as it is would be printed as a double ('%.14g'), several times
-- the work.
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
local groups = {}
if h[5] then
  for g in string.gmatch(h[5], '[^,]+') do groups[#groups + 1] = g end
else
  groups = redis.call('SMEMBERS', groups_key)
end
local score = redis.call('ZINCRBY', by_score, string.format('%d', vote_score * net), article)
-- The net-vote rankings hold one value for an article in every period
-- (net votes * top_step + the post second): the all-time one moves by
-- whole votes and the others take its new value, so no other reply is a
-- printed double. An article not in the all-time one was written by
-- another client and is not derived yet: its derivation counts this vote
-- with the others, karma included (one missing from time: is never
-- derived: its karma is counted here).
local step = string.format('%d', net * top_step)
local value = redis.call('ZADD', top[5], 'XX', 'INCR', step, article)
if value then
  for p = 1, 4 do redis.call('ZADD', top[p], 'XX', value, article) end
end
local poster = h[1] and as_member(h[1], user_prefix)
if poster then
  if value or not derivable then
    add_karma(karma, poster, net, now)
  end
end
-- The cached rankings of the poster and the groups (60 s caches, built by
-- reads) exist only while someone reads them: one EXISTS over each group's
-- score ranking (the book builds it too) and the markers the feed script
-- sets with each ranking of a user's or TOP_* ranking of a group's it
-- builds (see keys.rs, group_cached) finds whether any may; only then are
-- they named and moved in place (a missing one is left missing). The
-- poster's score ranking is one of them: a small sorted set is a listpack,
-- where moving one member reads every score before its new place as text,
-- which cost a vote more than all its other rankings together.
local probe = {}
for _, g in ipairs(groups) do
  probe[#probe + 1] = group_score_prefix .. g
  probe[#probe + 1] = group_prefix .. g .. cached_suffix
end
if poster then probe[#probe + 1] = poster .. cached_suffix end
if #probe > 0 and redis.call('EXISTS', unpack(probe)) > 0 then
  for _, g in ipairs(groups) do
    redis.call('ZADD', group_score_prefix .. g, 'XX', score, article)
    local prefix = group_prefix .. g .. group_top_infix
    for p = 1, 5 do redis.call('ZADD', prefix .. periods[p], 'XX', 'INCR', step, article) end
  end
  if poster then
    redis.call('ZADD', poster .. user_score_suffix, 'XX', score, article)
    local prefix = poster .. user_top_infix
    for p = 1, 5 do redis.call('ZADD', prefix .. periods[p], 'XX', 'INCR', step, article) end
  end
end
-- The event is written out rather than by cjson (which prints numbers as
-- doubles, with 14 digits): the id is digits, the score as Redis printed
-- it, the time from TIME's own digits, and the groups as they are unless
-- one holds a quote, a backslash or a control character. For an article
-- this vote left derived (in time: and the all-time ranking), it says how
-- many notifications the vote raised on the voted sets: one per set it
-- changed (the set it joined, the set it left) and one for an expiry. The
-- deriver, which receives them just before this event, then has nothing
-- to derive (see deriver.rs, OwnWrites).
local listed = '[]'
if #groups > 0 then
  listed = '["' .. table.concat(groups, '","') .. '"]'
  for _, g in ipairs(groups) do
    if string.find(g, '[%c"\\]') then listed = cjson.encode(groups) break end
  end
end
local own = ''
if value and derivable then
  local changed = (dir ~= 'none' and 1 or 0) + (was ~= 'none' and 1 or 0)
  own = string.format(',"notified":%d', changed + expiry)
end
redis.call('PUBLISH', score_channel, string.format(
  '{"id":"%s","score":"%s","votes":%d,"downvotes":%d,"at":"%s.%s%s","groups":%s%s}',
  id, score, votes, downvotes, t[1], string.rep('0', 6 - #t[2]), t[2], listed, own))
return {'changed', was, score}
