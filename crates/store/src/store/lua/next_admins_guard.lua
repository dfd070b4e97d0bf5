-- Hands out the next number of the last admin's guard (the cluster
-- layout, see store/moderation.rs): above the last one handed out, and at
-- least the clock's millisecond, so that the numbers a failed-over
-- primary lost with its last writes are not handed out again.
--
-- KEYS: [1] the last number handed out.
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = math.max((tonumber(redis.call('GET', KEYS[1])) or 0) + 1, ms)
redis.call('SET', KEYS[1], string.format('%.0f', n))
return {'counted', string.format('%.0f', n)}
