-- Starts a session after a successful logIn, unless the account is banned,
-- and forgets the name's counted attempts (see scripts/accounts.rs).
--
-- KEYS: [1] the session, [2] the account, [3] its sessions, [4] the name's
-- attempts.
-- ARGV: [1] the name, [2] the session's lifetime in seconds, [3] the token
-- hash.
-- Answers {'ok'} or {'banned', end} (Unix seconds, or 'forever').
local session, account, sessions = KEYS[1], KEYS[2], KEYS[3]
local h = redis.call('HMGET', account, 'role', 'banned_until')
local now = tonumber(redis.call('TIME')[1])
if h[2] and (h[2] == 'forever' or tonumber(h[2]) > now) then return {'banned', h[2]} end
local value = ARGV[1]
if h[1] then value = value .. ' ' .. h[1] end
redis.call('SET', session, value, 'EX', ARGV[2])
redis.call('SADD', sessions, ARGV[3])
redis.call('EXPIRE', sessions, ARGV[2])
redis.call('DEL', KEYS[4])
return {'ok'}
