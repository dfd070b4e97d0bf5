-- Flags or unflags an article as the caller, once per user (see
-- scripts/moderation.rs); the flag that reaches the threshold hides the
-- article and logs that. Needs rate_limit, karma, group_sizes and
-- moderation.
--
-- KEYS: common, then [12] the article, [13] its flags, [14] the caller's
-- counter, [15] the hiding action's index, [16] the article's log.
-- ARGV: common (the caller, the flag's reason), then [36] the article id,
-- [37] 'flag' or 'unflag', [38] [39] the rate limit and its window,
-- [40] the hiding action's name, [41] '1' when the caller moderates,
-- [42] the flags that hide an article.
local c = moderation_context()
local article, flags = KEYS[12], KEYS[13]
local id, flagging, member = ARGV[36], ARGV[37] == 'flag', c.user_prefix .. c.actor
local wait = rate_limit(KEYS[14], ARGV[38], ARGV[39])
if wait > 0 then return {'limited', wait} end
if redis.call('EXISTS', article) == 0 then return {'missing'} end
-- Out of every view already: moderators decide on it, others cannot see it.
if redis.call('HEXISTS', article, 'status') == 1 then
  return {ARGV[41] == '1' and 'same' or 'missing'}
end
if flagging then
  if redis.call('HSETNX', flags, member, c.reason) == 0 then return {'same'} end
elseif redis.call('HDEL', flags, member) == 0 then
  return {'same'}
end
local n = redis.call('HLEN', flags)
redis.call('HSET', article, 'flags', n)
if n == 0 then
  redis.call('ZREM', c.queue, article)
else
  redis.call('ZADD', c.queue, n, article)
end
if flagging and n >= tonumber(ARGV[42]) then
  local groups = redis.call('SMEMBERS', article .. c.groups_suffix)
  take_out(c, id, groups)
  redis.call('HSET', article, 'status', 'hidden')
  -- The flaggers and their reasons stay with the flags, not in the log.
  c.reason = ''
  log_entry(c, {action = ARGV[40], index = KEYS[15], subject = KEYS[16], article = id})
  announce(c, {id = id, groups = groups, removed = true})
end
return {'ok'}
