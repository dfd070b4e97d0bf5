-- Posts an article (see scripts/post.rs). Needs karma, rate_limit,
-- group_list, group_sizes, index_time and vote_index. KEYS[5] and KEYS[21]
-- are karma: and the group directory or, in the cluster layout, the
-- shard's outbox. KEYS[11..15] are the site's
-- net-vote rankings, [16..20] the poster's (a cache: written only when it
-- exists), then per_group keys per group named (see group_keys in
-- scripts/mod.rs).
local rate, ids, by_score, by_time, karma, slugs, suffixes, mine_time, mine_score, my_votes =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local directory, posted_link = KEYS[21], KEYS[22]
local first_group_key = 23
local poster, stem = ARGV[1], ARGV[4]
local article_prefix, voted_prefix, groups_suffix, channel = ARGV[7], ARGV[8], ARGV[9], ARGV[10]
local week, vote_score, top_step, per_group =
  tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13]), tonumber(ARGV[14])
local repost_window = tonumber(ARGV[15])
-- Ids are handed out per shard: the shard's count times ARGV[16] (the
-- number of shards) plus ARGV[17] (this shard's), so an id names its shard.
local id_stride, id_offset, via_outbox = tonumber(ARGV[16]), tonumber(ARGV[17]), ARGV[18] == '1'
-- ARGV[19] is '1' when my_votes (KEYS[10]) is the shard's outbox too; the
-- upvote queued there follows the answer (see lib/vote_index.lua).
local index_queued = ARGV[19] == '1'
local first_group = 20
-- A repost (or a retried post) of the link answers the first article and
-- is not counted.
if repost_window > 0 then
  local first = redis.call('GET', posted_link)
  local first_slug = first and redis.call('HGET', article_prefix .. first, 'slug')
  if first_slug then return {'posted', first, first_slug} end
end
local wait = rate_limit(rate, ARGV[5], ARGV[6])
if wait > 0 then return {'limited', wait} end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local id = redis.call('INCR', ids) * id_stride + id_offset
local article = article_prefix .. id
local voted = voted_prefix .. id
local groups_key = article .. groups_suffix
redis.call('SADD', voted, poster)
redis.call('EXPIRE', voted, week)
-- A slug's shard, as keys.rs computes it (Layout::of_slug): a suffixed
-- form is handed out only if it is this shard's, so that every slug is
-- claimed on its own shard (on one primary, every form is).
local function slug_shard(s)
  local h = 0
  for i = 1, #s do h = (h * 31 + string.byte(s, i)) % 1000003 end
  return h % id_stride
end
local slug = stem
if redis.call('HSETNX', slugs, slug, id) == 0 then
  local n = tonumber(redis.call('HGET', suffixes, stem)) or 1
  repeat
    n = n + 1
    slug = stem .. '-' .. n
  until slug_shard(slug) == id_offset and redis.call('HSETNX', slugs, slug, id) == 1
  redis.call('HSET', suffixes, stem, n)
end
local ts = string.format('%.6f', now)
local score = string.format('%.6f', now + vote_score)
redis.call('HSET', article, 'title', ARGV[2], 'link', ARGV[3], 'poster', poster,
  'time', ts, 'votes', 1, 'downvotes', 0, 'slug', slug, 'indexed', '1,0')
redis.call('ZADD', by_score, score, article)
redis.call('ZADD', by_time, ts, article)
redis.call('ZADD', mine_time, ts, article)
if redis.call('EXISTS', mine_score) == 1 then redis.call('ZADD', mine_score, score, article) end
add_karma(karma, poster, 1, now, via_outbox)
local queued = index_vote(my_votes, poster, article, ts, 'up', now, week, index_queued)
-- Net votes 1 (the own upvote of the poster), then the post time.
local top = string.format('%.0f', top_step + math.floor(now))
for k = 11, 15 do redis.call('ZADD', KEYS[k], top, article) end
for k = 16, 20 do
  if redis.call('EXISTS', KEYS[k]) == 1 then redis.call('ZADD', KEYS[k], top, article) end
end
for i = first_group, #ARGV do
  local g, k = ARGV[i], first_group_key + per_group * (i - first_group)
  if redis.call('SADD', KEYS[k], article) == 1 then resize_group(directory, g, 1, via_outbox) end
  redis.call('SADD', groups_key, g)
  redis.call('SADD', KEYS[k + per_group - 1], article)
  if redis.call('EXISTS', KEYS[k + 1]) == 1 then redis.call('ZADD', KEYS[k + 1], score, article) end
  if redis.call('EXISTS', KEYS[k + 2]) == 1 then redis.call('ZADD', KEYS[k + 2], ts, article) end
  for j = k + 3, k + per_group - 2 do
    if redis.call('EXISTS', KEYS[j]) == 1 then redis.call('ZADD', KEYS[j], top, article) end
  end
end
list_groups(article, groups_key)
if repost_window > 0 then redis.call('SET', posted_link, id, 'EX', repost_window) end
local groups = {}
for i = first_group, #ARGV do groups[#groups + 1] = ARGV[i] end
redis.call('PUBLISH', channel, cjson.encode({ id = tostring(id), groups = groups, at = ts }))
return with_queued({'posted', id, slug}, queued)
