-- Revokes a session and publishes its end in the same step, so every
-- instance ends what was authenticated with it (see crate::sessions).
-- KEYS: [1] the session. ARGV: [1] the channel, [2] the token hash.
local ended = redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[1], ARGV[2])
return {'ended', ended}
