-- A session, as its account stands now, and its user's votes on a page's
-- articles, for a logged-in page filled from its template (see
-- scripts/accounts.rs). Needs session. A session is made on its user's
-- shard, where their account and vote index are too.
--
-- KEYS: [1] the session.
-- ARGV: [1] the user key prefix on this shard, [2] the vote index's
-- suffix, then the articles.
local user = session_user(KEYS[1], ARGV[1])
if not user then return {'none'} end
local index = ARGV[1] .. user[2] .. ARGV[2]
-- In parts: unpack's results must fit Lua's stack.
local votes = {}
for first = 3, #ARGV, 1000 do
  local part = redis.call('ZMSCORE', index, unpack(ARGV, first, math.min(first + 999, #ARGV)))
  for _, vote in ipairs(part) do votes[#votes + 1] = vote end
end
return {'session', user, votes}
