-- Adds and removes an article's groups, poster only (see
-- scripts/groups.rs). Needs rate_limit, group_list and group_sizes.
--
-- KEYS: [1] the caller's counter, [2] the article, [3] the article's
-- groups, [4] the score ranking, [5] the time ranking, [6] the all-time
-- net-vote ranking, [7] the group directory, then ARGV[7] keys per group
-- named (the groups to add, then those to remove).
-- ARGV: [1] the caller's member, [2] how many groups are added (the first
-- ones named), [3] [4] the rate limit and its window, [5] the user prefix,
-- [6] the most groups an article may be in, [7] keys per group, [8] '1'
-- when the caller moderates, [9] '1' when the directory (KEYS[7]) is the
-- shard's outbox, [10..] the groups.
local rate, article, groups_key, by_score, by_time, top_all, directory =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local first_group_key = 8
local caller, nadd, user_prefix = ARGV[1], tonumber(ARGV[2]), ARGV[5]
local max_groups, per_group = tonumber(ARGV[6]), tonumber(ARGV[7])
local via_outbox = ARGV[9] == '1'
local first_group = 10
local wait = rate_limit(rate, ARGV[3], ARGV[4])
if wait > 0 then return {'limited', wait} end
if redis.call('EXISTS', article) == 0 then return {'missing'} end
-- A removed or hidden article's groups wait for its restore.
if redis.call('HEXISTS', article, 'status') == 1 then
  return {ARGV[8] == '1' and 'out' or 'missing'}
end
local poster = redis.call('HGET', article, 'poster')
if poster ~= caller and (user_prefix .. tostring(poster)) ~= caller then return {'forbidden'} end
local count = redis.call('SCARD', groups_key)
for i = first_group, #ARGV do
  local member = redis.call('SISMEMBER', groups_key, ARGV[i]) == 1
  if i < first_group + nadd and not member then count = count + 1 end
  if i >= first_group + nadd and member then count = count - 1 end
end
if count > max_groups then return {'too-many-groups'} end
local score = redis.call('ZSCORE', by_score, article)
local time = redis.call('ZSCORE', by_time, article)
local top = redis.call('ZSCORE', top_all, article)
for i = first_group, #ARGV do
  local g, k = ARGV[i], first_group_key + per_group * (i - first_group)
  if i < first_group + nadd then
    if redis.call('SADD', KEYS[k], article) == 1 then resize_group(directory, g, 1, via_outbox) end
    redis.call('SADD', groups_key, g)
    redis.call('SADD', KEYS[k + per_group - 1], article)
    if score and redis.call('EXISTS', KEYS[k + 1]) == 1 then redis.call('ZADD', KEYS[k + 1], score, article) end
    if time and redis.call('EXISTS', KEYS[k + 2]) == 1 then redis.call('ZADD', KEYS[k + 2], time, article) end
    for j = k + 3, k + per_group - 2 do
      if top and redis.call('EXISTS', KEYS[j]) == 1 then redis.call('ZADD', KEYS[j], top, article) end
    end
  else
    if redis.call('SREM', KEYS[k], article) == 1 then resize_group(directory, g, -1, via_outbox) end
    redis.call('SREM', groups_key, g)
    redis.call('SREM', KEYS[k + per_group - 1], article)
    for j = k + 1, k + per_group - 2 do redis.call('ZREM', KEYS[j], article) end
  end
end
list_groups(article, groups_key)
return {'ok'}
