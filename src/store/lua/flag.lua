-- Flags or unflags an article as the caller, once per user (see
-- scripts/moderation.rs); the flag that reaches the threshold hides the
-- article and logs that. Needs rate_limit, karma and moderation.
--
-- KEYS: common, then [12] the article, [13] its flags, [14] the caller's
-- counter, [15] the hiding action's index, [16] the article's log.
-- ARGV: common (the caller, the flag's reason), then [32] the article id,
-- [33] 'flag' or 'unflag', [34] [35] the rate limit and its window,
-- [36] the hiding action's name, [37] '1' when the caller moderates,
-- [38] the flags that hide an article.
local c = moderation_context()
local article, flags = KEYS[12], KEYS[13]
local id, flagging, member = ARGV[32], ARGV[33] == 'flag', c.user_prefix .. c.actor
local wait = rate_limit(KEYS[14], ARGV[34], ARGV[35])
if wait > 0 then return {'limited', wait} end
if redis.call('EXISTS', article) == 0 then return {'missing'} end
-- Out of every view already: moderators decide on it, others cannot see it.
if redis.call('HEXISTS', article, 'status') == 1 then
  return {ARGV[37] == '1' and 'same' or 'missing'}
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
if flagging and n >= tonumber(ARGV[38]) then
  local groups = redis.call('SMEMBERS', article .. c.groups_suffix)
  take_out(c, id, groups)
  redis.call('HSET', article, 'status', 'hidden')
  -- The flaggers and their reasons stay with the flags, not in the log.
  c.reason = ''
  log_entry(c, {action = ARGV[36], index = KEYS[15], subject = KEYS[16], article = id})
  announce(c, {id = id, groups = groups, removed = true})
end
return {'ok'}
