-- Shared by the scripts that copy voters from the book's voted sets into
-- the vote indexes (derive_articles, index_voters): one batch of voters.
-- Needs index_time.
--
-- index_members(c, article, posted, voters, sign) writes each voter that is
-- a user (c.user_prefix) into its user:<name>:votes as article ->
-- sign .. index_time(posted), as the vote script does, written only where
-- it differs, and keeps the index for a
-- week (c.week) as the vote script does. Voters stored without the prefix
-- never matched a votegraph user and are skipped. Answers how many
-- entries it wrote.
local function index_members(c, article, posted, voters, sign)
  local value = sign .. index_time(posted)
  local written = 0
  for _, voter in ipairs(voters) do
    if string.sub(voter, 1, #c.user_prefix) == c.user_prefix then
      local index = voter .. c.user_votes_suffix
      local old = redis.call('ZSCORE', index, article)
      if not old or tonumber(old) ~= tonumber(value) then
        redis.call('ZADD', index, value, article)
        keep_index(index, c.week)
        written = written + 1
      end
    end
  end
  return written
end

-- All the voters of one set (the caller bounds its size).
local function index_voters(c, article, posted, set, sign)
  return index_members(c, article, posted, redis.call('SMEMBERS', set), sign)
end
