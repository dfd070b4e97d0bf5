-- Removes or restores an article, with its log entry (see
-- scripts/moderation.rs). Needs rate_limit, karma and moderation.
--
-- KEYS: common, then [12] the article, [13] its flags, [14] the caller's
-- counter, [15] the action's index, [16] the article's log.
-- ARGV: common (the moderator, the reason), then [32] the article id,
-- [33] 'remove' or 'restore', [34] [35] the rate limit and its window
-- (empty: not counted), [36] the action's name.
local c = moderation_context()
local article = KEYS[12]
local id, removing = ARGV[32], ARGV[33] == 'remove'
if ARGV[34] ~= '' then
  local wait = rate_limit(KEYS[14], ARGV[34], ARGV[35])
  if wait > 0 then return {'limited', wait} end
end
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
  redis.call('HDEL', article, 'status', 'removal_reason', 'flags')
  redis.call('DEL', KEYS[13])
end
redis.call('ZREM', c.queue, article)
log_entry(c, {action = ARGV[36], index = KEYS[15], subject = KEYS[16], moderator = c.actor,
  article = id})
announce(c, {id = id, groups = groups, removed = removing})
return {'ok'}
