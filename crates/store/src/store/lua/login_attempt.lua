-- Counts one logIn attempt before its password is checked (see
-- scripts/accounts.rs). Needs rate_limit.
local by_name, by_address = KEYS[1], KEYS[2]
local wait = rate_limit(by_address, ARGV[3], ARGV[4])
if wait > 0 then return {'address', wait} end
wait = rate_limit(by_name, ARGV[1], ARGV[2])
if wait > 0 then return {'name', wait} end
return {'ok'}
