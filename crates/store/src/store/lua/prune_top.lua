-- Removes from a period's net-vote ranking a batch of the articles posted
-- before it, resuming where the last call stopped (see scripts/top.rs),
-- and from the cached rankings of the period of their groups and poster,
-- so no cached ranking keeps an article past its period either.
-- Needs karma (as_member).
local top, by_time, marks = KEYS[1], KEYS[2], KEYS[3]
local cutoff, batch, period = ARGV[1], tonumber(ARGV[2]), ARGV[3]
-- ARGV[9] is the shard's tag, for keys built from a member.
local groups_suffix, group_prefix, group_top, user_prefix, user_top, tag =
  ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local from = redis.call('HGET', marks, period)
local min = '-inf'
if from then min = '(' .. from end
local old = redis.call('ZRANGEBYSCORE', by_time, min, cutoff, 'WITHSCORES', 'LIMIT', 0, batch)
local n = #old / 2
for i = 1, #old, 2 do
  local article = old[i]
  redis.call('ZREM', top, article)
  for _, g in ipairs(redis.call('SMEMBERS', article .. groups_suffix)) do
    redis.call('ZREM', group_prefix .. g .. group_top .. period, article)
  end
  local poster = redis.call('HGET', article, 'poster')
  if poster then
    redis.call('ZREM', tag .. as_member(poster, user_prefix) .. user_top .. period, article)
  end
end
if n == batch then redis.call('HSET', marks, period, old[#old]) else redis.call('HSET', marks, period, cutoff) end
return {'pruned', n}
