-- Flags or unflags an article as the caller, once per user (see
-- scripts/moderation.rs). Every flag counts in the article's flags and
-- the queue; only those that may hide count toward the threshold: from an
-- account that earned it (the caller checks), never again from one whose
-- flag on the article a restore cleared. The flag that brings those to the
-- threshold hides the article and logs that. Needs rate_limit, karma,
-- group_sizes and moderation.
--
-- KEYS: common, then [12] the article, [13] its flags, [14] the caller's
-- counter, [15] the hiding action's index, [16] the article's log, [17]
-- the flaggers whose flags may hide it, [18] those a restore cleared.
-- ARGV: common (the caller, the flag's reason), then [36] the article id,
-- [37] 'flag' or 'unflag', [38] [39] the rate limit and its window,
-- [40] the hiding action's name, [41] '1' when the caller moderates,
-- [42] the flags that hide an article, [43] '1' when the caller's account
-- may hide articles.
local c = moderation_context()
local article, flags, hiding, cleared = KEYS[12], KEYS[13], KEYS[17], KEYS[18]
local id, flagging, member = ARGV[36], ARGV[37] == 'flag', c.user_prefix .. c.actor
local wait = rate_limit(KEYS[14], ARGV[38], ARGV[39])
if wait > 0 then return {'limited', wait} end
if redis.call('EXISTS', article) == 0 then return {'missing'} end
-- Out of every view already: moderators decide on it, others cannot see it.
if redis.call('HEXISTS', article, 'status') == 1 then
  return {ARGV[41] == '1' and 'same' or 'missing'}
end
local counts = false
if flagging then
  if redis.call('HSETNX', flags, member, c.reason) == 0 then return {'same'} end
  counts = ARGV[43] == '1' and redis.call('SISMEMBER', cleared, member) == 0
  if counts then redis.call('SADD', hiding, member) end
elseif redis.call('HDEL', flags, member) == 0 then
  return {'same'}
else
  redis.call('SREM', hiding, member)
end
local n = redis.call('HLEN', flags)
redis.call('HSET', article, 'flags', n)
if n == 0 then
  redis.call('ZREM', c.queue, article)
else
  redis.call('ZADD', c.queue, n, article)
end
if counts and redis.call('SCARD', hiding) >= tonumber(ARGV[42]) then
  local groups = redis.call('SMEMBERS', article .. c.groups_suffix)
  take_out(c, id, groups)
  redis.call('HSET', article, 'status', 'hidden')
  -- The flaggers and their reasons stay with the flags, not in the log.
  c.reason = ''
  log_entry(c, {action = ARGV[40], index = KEYS[15], subject = KEYS[16], article = id})
  announce(c, {id = id, groups = groups, removed = true})
end
return {'ok'}
