-- Removes from a period's net-vote ranking a batch of the articles posted
-- before it, resuming where the last call stopped (see scripts/top.rs).
--
-- KEYS: [1] the period's ranking, [2] the time ranking, [3] the hash of
-- where each period's pruning stopped.
-- ARGV: [1] the cutoff post time, [2] the batch size, [3] the period name.
local top, by_time, marks = KEYS[1], KEYS[2], KEYS[3]
local cutoff, batch, period = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local from = redis.call('HGET', marks, period)
local min = '-inf'
if from then min = '(' .. from end
local old = redis.call('ZRANGEBYSCORE', by_time, min, cutoff, 'WITHSCORES', 'LIMIT', 0, batch)
local n = #old / 2
for i = 1, #old, 2 do redis.call('ZREM', top, old[i]) end
if n == batch then redis.call('HSET', marks, period, old[#old]) else redis.call('HSET', marks, period, cutoff) end
return {'pruned', n}
