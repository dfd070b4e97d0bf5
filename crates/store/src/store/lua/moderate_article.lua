-- Removes or restores an article, with its log entry (see
-- scripts/moderation.rs). A restore clears its flags, for good: their
-- flaggers' later flags never count toward hiding it again; and its poster
-- gets the karma of the votes cast while it was out. Needs rate_limit,
-- karma, group_sizes and moderation.
--
-- KEYS: common, then [12] the article, [13] its flags, [14] the caller's
-- counter, [15] the action's index, [16] the article's log, [17] the
-- flaggers whose flags may hide it, [18] those a restore cleared, [19]
-- karma: (in the cluster layout, the shard's outbox).
-- ARGV: common (the moderator, the reason), then [36] the article id,
-- [37] 'remove' or 'restore', [38] [39] the rate limit and its window
-- ('0': not counted here), [40] the action's name.
local c = moderation_context()
local article = KEYS[12]
local id, removing = ARGV[36], ARGV[37] == 'remove'
local wait = rate_limit(KEYS[14], ARGV[38], ARGV[39])
if wait > 0 then return {'limited', wait} end
if redis.call('EXISTS', article) == 0 then return {'missing'} end
local status = redis.call('HGET', article, 'status')
local groups = redis.call('SMEMBERS', article .. c.groups_suffix)
if removing then
  if status == 'removed' then return {'same'} end
  if not status then take_out(c, id, groups) end
  redis.call('HSET', article, 'status', 'removed', 'removal_reason', c.reason)
else
  if not status then return {'same'} end
  put_back(c, id, groups)
  local flaggers = redis.call('HKEYS', KEYS[13])
  -- In slices: unpack takes a bounded number of values.
  for i = 1, #flaggers, 1000 do
    redis.call('SADD', KEYS[18], unpack(flaggers, i, math.min(i + 999, #flaggers)))
  end
  local h = redis.call('HMGET', article, 'poster', 'pending_karma')
  if h[1] and h[2] then
    add_karma(KEYS[19], as_member(h[1], c.user_prefix), tonumber(h[2]), c.now, c.via_outbox)
  end
  redis.call('HDEL', article, 'status', 'removal_reason', 'flags', 'pending_karma')
  redis.call('DEL', KEYS[13], KEYS[17])
end
redis.call('ZREM', c.queue, article)
log_entry(c, {action = ARGV[40], index = KEYS[15], subject = KEYS[16], moderator = c.actor,
  article = id})
announce(c, {id = id, groups = groups, removed = removing})
return {'ok'}
