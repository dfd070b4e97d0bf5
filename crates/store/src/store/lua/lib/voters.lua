-- Copies voters from the book's voted sets into their vote indexes, for
-- derive_articles and index_voters. Needs index_time.
--
-- index_members(c, article, posted, voters, sign) files the article under
-- sign .. index_time(posted) in each voter's index that differs, as the
-- vote script does, keeping the index a week (c.week); voters without the
-- user prefix (c.user_prefix) never matched a user and are skipped.
-- Answers how many entries it wrote.
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
