-- Creates an account and its first session together (see
-- scripts/accounts.rs). Needs rate_limit and session.
--
-- Until the folded-name index is built (its marker is missing), sign-ups
-- wait, so that no case twin slips in meanwhile.
--
-- KEYS: [1] the account, [2] the session, [3] the client address' counter,
-- [4] folded name -> name, [5] the marker of the folded-name index, [6]
-- the account's sessions.
-- ARGV: [1] the name, [2] the password hash, [3] the creation time, [4] the
-- session's TTL in seconds, [5] [6] the rate limit and its window, [7] the
-- folded name, [8] the token hash.
local user, session, rate, by_folded, indexed = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
if redis.call('EXISTS', indexed) == 0 then return {'indexing'} end
local wait = rate_limit(rate, ARGV[5], ARGV[6])
if wait > 0 then return {'limited', wait} end
if redis.call('EXISTS', user) == 1 then return {'taken'} end
if redis.call('HEXISTS', by_folded, ARGV[7]) == 1 then return {'taken'} end
redis.call('HSET', user, 'name', ARGV[1], 'password', ARGV[2], 'created', ARGV[3])
redis.call('HSET', by_folded, ARGV[7], ARGV[1])
redis.call('SET', session, session_value(ARGV[1]), 'EX', ARGV[4])
redis.call('SADD', KEYS[6], ARGV[8])
redis.call('EXPIRE', KEYS[6], ARGV[4])
return {'created'}
