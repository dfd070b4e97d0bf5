-- Which of one shard's sessions still let their user in (see
-- lib/session.lua and scripts/accounts.rs): the sweep of open WebSockets.
-- Needs session.
-- KEYS: the sessions. ARGV: [1] the user key prefix on this shard.
-- Answers {'alive', 1 or 0 for each session, in order}.
local alive = {'alive'}
for i, session in ipairs(KEYS) do
  local user = session_user(session, ARGV[1])
  alive[i + 1] = (user and user[1] == 'active') and 1 or 0
end
return alive
