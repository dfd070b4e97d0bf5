-- Sets the directory's counts of a batch of groups to their article sets'
-- sizes, dropping empty groups (see scripts/directory.rs).
--
-- KEYS: [1] the group directory.
-- ARGV: [1] the first rank, [2] the batch size, [3] the group prefix.
local directory = KEYS[1]
local start, batch, prefix = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local names = redis.call('ZRANGE', directory, start, start + batch - 1)
for _, g in ipairs(names) do
  local n = redis.call('SCARD', prefix .. g)
  if n == 0 then redis.call('ZREM', directory, g) else redis.call('ZADD', directory, -n, g) end
end
return {'built', #names}
