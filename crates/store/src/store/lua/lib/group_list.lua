-- Shared by the scripts that change an article's groups (post, set-groups):
-- copies the article's group set into the hash's groups field, sorted and
-- joined with ',', which pages read with the rest of the hash. Answers how
-- many groups it listed.
local function list_groups(article, groups_key)
  local names = redis.call('SMEMBERS', groups_key)
  table.sort(names)
  redis.call('HSET', article, 'groups', table.concat(names, ','))
  return #names
end
