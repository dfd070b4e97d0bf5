-- A page of the group directory, from the top or right after the value
-- and name ARGV[3] and ARGV[4] (see scripts/directory.rs).
local directory = KEYS[1]
local want, max_ties = tonumber(ARGV[1]) + 1, tonumber(ARGV[2])
local rank = 0
if ARGV[3] then
  -- After (s, name): above s in the set (a smaller group), or at s with a
  -- name after it (ties run by name, ascending).
  local s, name = ARGV[3], ARGV[4]
  local now = redis.call('ZSCORE', directory, name)
  if now and tonumber(now) == tonumber(s) then
    rank = redis.call('ZRANK', directory, name) + 1
  else
    rank = redis.call('ZCOUNT', directory, '-inf', '(' .. s)
    for _, tie in ipairs(redis.call('ZRANGE', directory, s, s, 'BYSCORE', 'LIMIT', 0, max_ties)) do
      if tie <= name then rank = rank + 1 end
    end
  end
end
return {redis.call('ZCARD', directory), redis.call('ZRANGE', directory, rank, rank + want - 1, 'WITHSCORES')}
