-- Gives an article a new slug, poster only, freeing the old one in the same
-- step (see scripts/slugs.rs). Needs rate_limit.
--
-- KEYS: [1] the caller's counter, [2] the article, [3] slug -> id.
-- ARGV: [1] the article id, [2] the caller's member, [3] the new slug,
-- [4] [5] the rate limit and its window, [6] the user prefix, [7] '1'
-- when the caller moderates, [8] '1' when the slug index is on other
-- shards (the cluster layout): its claim and release are the caller's,
-- and the old slug is answered.
local rate, article, slugs = KEYS[1], KEYS[2], KEYS[3]
local id, caller, new, user_prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[6]
local poster, old = unpack(redis.call('HMGET', article, 'poster', 'slug'))
local own = poster == caller or (user_prefix .. tostring(poster)) == caller
-- The poster asking for the slug the article has (a retry) is not counted.
if own and old == new then return {'ok'} end
local wait = rate_limit(rate, ARGV[4], ARGV[5])
if wait > 0 then return {'limited', wait} end
if redis.call('EXISTS', article) == 0 then return {'missing'} end
if ARGV[7] ~= '1' and redis.call('HEXISTS', article, 'status') == 1 then return {'missing'} end
if not own then return {'forbidden'} end
if ARGV[8] == '1' then
  redis.call('HSET', article, 'slug', new)
  return {'ok', old or ''}
end
local owner = redis.call('HGET', slugs, new)
if owner and owner ~= id then return {'taken'} end
redis.call('HSET', slugs, new, id)
redis.call('HSET', article, 'slug', new)
if old then redis.call('HDEL', slugs, old) end
return {'ok'}
