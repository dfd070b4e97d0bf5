-- Casts a voter's vote on an article (see scripts/vote.rs). Needs karma,
-- rate_limit, index_time and vote_index.
--
-- KEYS: the voter's [1] vote counter and [2] vote index, the article's [3]
-- hash, [4] upvoters, [5] downvoters and [6] group set, [7] time:,
-- [8] score:, [9] karma, [10..14] the site's net-vote rankings (all-time
-- last).
-- ARGV: [1] the article id, [2] the voter's member, [3] up, down or none,
-- [4] [5] the rate limit and its window, [6] the voting window in seconds,
-- [7] a vote's score, [8] the net-vote step, [9] the score channel, then
-- the prefixes and suffixes of the owners' cached rankings: [10] user,
-- [11] cached marker, [12] group, [13] group net-vote, [14] group score,
-- [15] user score, [16] user net-vote, [17..21] the period names,
-- [22] '1' when the voter moderates, [23] the shard's tag for keys built
-- from a member, [24] '1' when karma (KEYS[9]) is the shard's outbox and
-- [25] '1' when the index (KEYS[2]) is. A vote queued for the index
-- answers what it queued after its status (see lib/vote_index.lua).
local rate, index, article, upvoters, downvoters, group_set, by_time, by_score, karma =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local id, voter, dir = ARGV[1], ARGV[2], ARGV[3]
local week, vote_score, top_step = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local channel, user_prefix, cached_suffix = ARGV[9], ARGV[10], ARGV[11]
local group_prefix, group_top_infix, group_score_prefix = ARGV[12], ARGV[13], ARGV[14]
local user_score_suffix, user_top_infix = ARGV[15], ARGV[16]
local tag, via_outbox, index_queued = ARGV[23], ARGV[24] == '1', ARGV[25] == '1'

local wait = rate_limit(rate, ARGV[4], ARGV[5])
if wait > 0 then return {'limited', wait} end
-- A removed or hidden article is out of sight but for moderators.
local out = redis.call('HEXISTS', article, 'status') == 1
if out and ARGV[22] ~= '1' then return {'missing'} end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000

-- time: decides the voting window, as in the book; an article missing from
-- it (a restore, a hand edit) has the hash's time, and is never derived.
local posted = redis.call('ZSCORE', by_time, article)
local derivable = posted ~= false
if not derivable then posted = redis.call('HGET', article, 'time') end
posted = tonumber(posted)
-- NaN is the one value unequal to itself.
if not posted or posted ~= posted or math.abs(posted) == math.huge then return {'missing'} end
if now - posted >= week then return {'closed'} end

-- The voted sets decide the previous direction: the write that records the
-- new one tells it.
local was = 'none'
if dir == 'none' then
  if redis.call('SREM', upvoters, voter) == 1 then was = 'up'
  elseif redis.call('SREM', downvoters, voter) == 1 then was = 'down' end
else
  local target, other, opposite = upvoters, downvoters, 'down'
  if dir == 'down' then target, other, opposite = downvoters, upvoters, 'up' end
  if redis.call('SADD', target, voter) == 0 then was = dir
  elseif redis.call('SREM', other, voter) == 1 then was = opposite end
end
-- The index follows the sets whatever the outcome, so a vote the book's
-- code cast is indexed by the voter's next vote on the article, and a
-- vote sent again after an unknown outcome writes its voter's index on
-- another shard again before it answers.
local queued = index_vote(index, voter, article, posted, dir, now, week, index_queued)
if was == dir then return with_queued({'same'}, queued) end
local changed = with_queued({'changed'}, queued)

local h = redis.call('HMGET', article, 'poster', 'votes', 'downvotes', 'indexed', 'groups')
local old_up, old_down = tonumber(h[2]) or 0, tonumber(h[3]) or 0
local up_moved = (dir == 'up' and 1 or 0) - (was == 'up' and 1 or 0)
local down_moved = (dir == 'down' and 1 or 0) - (was == 'down' and 1 or 0)
local net = up_moved - down_moved
local ups, downs = old_up + up_moved, old_down + down_moved

-- A voted set the hash counts no one in was made by this vote: it expires
-- when the window closes, unless the book gave it its expiry already.
local made
if dir == 'up' and old_up <= 0 then made = upvoters end
if dir == 'down' and old_down <= 0 then made = downvoters end
if made and redis.call('TTL', made) == -1 then
  redis.call('EXPIREAT', made, math.floor(posted + week + 1))
end
-- The indexed counts move with the vote, so a difference from the sets
-- that another writer left stays for the deriver to see.
local indexed_up, indexed_down = string.match(h[4] or '', '^(%d+),(%d+)$')
if indexed_up then
  redis.call('HSET', article, 'votes', ups, 'downvotes', downs,
    'indexed', (indexed_up + up_moved) .. ',' .. (indexed_down + down_moved))
else
  redis.call('HSET', article, 'votes', ups, 'downvotes', downs)
end

if out then
  -- Its score and its poster's karma wait in the hash for its restore.
  redis.call('HINCRBYFLOAT', article, 'removed_score', net * vote_score)
  if h[1] then redis.call('HINCRBY', article, 'pending_karma', net) end
  return changed
end
local score = redis.call('ZINCRBY', by_score, net * vote_score, article)
-- An article missing from the all-time net-vote ranking was written by
-- another client and is not derived yet: its derivation counts this vote,
-- karma included. The other periods take the all-time value (XX: a period
-- the article has left is not written back).
local top = redis.call('ZADD', KEYS[14], 'XX', 'INCR', net * top_step, article)
if top then
  for k = 10, 13 do redis.call('ZADD', KEYS[k], 'XX', top, article) end
end
local poster = h[1] and as_member(h[1], user_prefix)
if poster and (top or not derivable) then add_karma(karma, poster, net, now, via_outbox) end

-- The hash keeps the groups joined by commas; an article another client
-- wrote has only the group set.
local groups = {}
local joined = h[5] or table.concat(redis.call('SMEMBERS', group_set), ',')
for g in string.gmatch(joined, '[^,]+') do groups[#groups + 1] = g end
redis.call('PUBLISH', channel, cjson.encode({
  id = id, score = score, votes = ups, downvotes = downs,
  at = string.format('%d.%06d', t[1], t[2]), groups = groups }))

-- The groups' and the poster's cached rankings exist only while someone
-- reads them: a group's score ranking (the book builds it too) and each
-- owner's marker (see keys.rs, group_cached) say whether any may, in one
-- EXISTS; those that exist move, and missing ones stay missing.
local probe, tops = {}, {}
for _, g in ipairs(groups) do
  probe[#probe + 1] = group_score_prefix .. g
  probe[#probe + 1] = group_prefix .. g .. cached_suffix
end
if poster then probe[#probe + 1] = tag .. poster .. cached_suffix end
if #probe == 0 or redis.call('EXISTS', unpack(probe)) == 0 then return changed end
for _, g in ipairs(groups) do
  redis.call('ZADD', group_score_prefix .. g, 'XX', score, article)
  tops[#tops + 1] = group_prefix .. g .. group_top_infix
end
if poster then
  redis.call('ZADD', tag .. poster .. user_score_suffix, 'XX', score, article)
  tops[#tops + 1] = tag .. poster .. user_top_infix
end
if top then
  for _, prefix in ipairs(tops) do
    for p = 17, 21 do redis.call('ZADD', prefix .. ARGV[p], 'XX', top, article) end
  end
end
return changed
