-- Counts a view once per viewer per view window (see scripts/views.rs).
-- Needs rate_limit.
--
-- KEYS: [1] the viewer's counter, [2] the viewers counted in this window,
-- [3] the article.
-- ARGV: [1] the viewer, [2] [3] the rate limit and its window, [4] the view
-- window in seconds, [5] '1' when the viewer moderates.
local rate, viewers, article = KEYS[1], KEYS[2], KEYS[3]
local viewer = ARGV[1]
if redis.call('EXISTS', article) == 0 then return {'missing'} end
if ARGV[5] ~= '1' and redis.call('HEXISTS', article, 'status') == 1 then return {'missing'} end
if redis.call('SISMEMBER', viewers, viewer) == 1 then return {'repeat'} end
local wait = rate_limit(rate, ARGV[2], ARGV[3])
if wait > 0 then return {'limited', wait} end
redis.call('SADD', viewers, viewer)
if redis.call('TTL', viewers) < 0 then redis.call('EXPIRE', viewers, ARGV[4]) end
redis.call('HINCRBY', article, 'views', 1)
return {'counted'}
