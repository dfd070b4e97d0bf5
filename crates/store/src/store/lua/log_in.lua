-- Starts a session after a successful logIn, unless the account is banned,
-- and forgets the name's counted attempts (see scripts/accounts.rs).
-- Needs session.
--
-- KEYS: [1] the session, [2] the account, [3] its sessions, [4] the name's
-- attempts.
-- ARGV: [1] the name, [2] the session's lifetime in seconds, [3] the token
-- hash.
-- Answers {'ok'} or {'banned', end} (Unix seconds, or 'forever').
local session, account, sessions = KEYS[1], KEYS[2], KEYS[3]
local ban = redis.call('HGET', account, 'banned_until')
local now = tonumber(redis.call('TIME')[1])
if ban and (ban == 'forever' or tonumber(ban) > now) then return {'banned', ban} end
redis.call('SET', session, session_value(ARGV[1]), 'EX', ARGV[2])
redis.call('SADD', sessions, ARGV[3])
redis.call('EXPIRE', sessions, ARGV[2])
redis.call('DEL', KEYS[4])
return {'ok'}
