-- Writes the net-vote scores of a batch of articles, derived from the
-- book's score and time rankings (see scripts/top.rs).
--
-- KEYS: [1] the time ranking, [2] the score ranking, [3..7] the net-vote
-- rankings, one per period, the all-time one last.
-- ARGV: [1] the post time to start from, [2] the batch size, [3] now (Unix
-- seconds), [4..7] the periods' lengths in seconds (all but all-time),
-- [8] the articles posted at ARGV[1] already done, [9] a vote's score,
-- [10] the net-vote step.
local by_time, by_score = KEYS[1], KEYS[2]
local from, batch, now, skip = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[8])
local vote_score, top_step = tonumber(ARGV[9]), tonumber(ARGV[10])
local items = redis.call('ZRANGEBYSCORE', by_time, from, '+inf', 'WITHSCORES', 'LIMIT', skip, batch)
for i = 1, #items, 2 do
  local m, t = items[i], tonumber(items[i + 1])
  local s = tonumber(redis.call('ZSCORE', by_score, m))
  local v = s and math.floor((s - t) / vote_score + 0.5) * top_step + math.floor(t)
  -- An article whose value is already right (the common case of a sweep)
  -- costs two reads and no write.
  if v and tonumber(redis.call('ZSCORE', KEYS[7], m)) ~= v then
    for j = 1, 4 do
      if now - t < tonumber(ARGV[3 + j]) then
        redis.call('ZADD', KEYS[2 + j], v, m)
      else
        redis.call('ZREM', KEYS[2 + j], m)
      end
    end
    redis.call('ZADD', KEYS[7], v, m)
  end
end
if #items / 2 < batch then return {'built', #items / 2} end
-- The next batch starts at the last post time, past the articles of this
-- one posted at that instant (a run of them may span batches).
local last, same = items[#items], 0
for i = #items, 2, -2 do
  if items[i] ~= last then break end
  same = same + 1
end
if tonumber(last) == tonumber(from) then same = same + skip end
return {'more', #items / 2, last, same}
