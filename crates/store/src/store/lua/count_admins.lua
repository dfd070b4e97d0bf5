-- Counts this shard's admins for the last admin's guard numbered ARGV[1]
-- (the cluster layout, see store/moderation.rs), and keeps the newest
-- number that counted them: a guard with an older number, whose count of
-- this shard may be stale now, then removes no admin (moderate_user.lua).
--
-- KEYS: [1] this shard's admins, [2] the newest guard number that counted
-- them.
local admins, newest, guard = KEYS[1], KEYS[2], ARGV[1]
if tonumber(guard) > (tonumber(redis.call('GET', newest)) or 0) then
  redis.call('SET', newest, guard)
end
return {'counted', redis.call('SCARD', admins)}
