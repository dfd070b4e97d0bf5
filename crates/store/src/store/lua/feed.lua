-- A page of a ranking from rank ARGV[8], or right after the value and
-- member ARGV[9] and ARGV[10] (see scripts/feeds.rs). KEYS[4] is the
-- owner's marker, set while a built ranking lives (the ranking itself when
-- there is none).
local key, source, members = KEYS[1], KEYS[2], KEYS[3]
local build, want, min_time = ARGV[1] == '1', tonumber(ARGV[2]) + 1, tonumber(ARGV[3])
local cache_secs, max_ties, feed_scan, top_step =
  tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
-- A cache has a lifetime: one without (kept forever by hand, and so not
-- kept current) is built anew.
if build and redis.call('TTL', key) < 0 then
  redis.call('ZINTERSTORE', key, 2, source, members, 'WEIGHTS', 1, 0)
  redis.call('EXPIRE', key, cache_secs)
  if KEYS[4] ~= key then redis.call('SET', KEYS[4], '1', 'EX', cache_secs) end
end
local rank = tonumber(ARGV[8])
if ARGV[9] then
  -- After (s, m): below s, or at s with a member before m (ties run by
  -- member, descending, as ZREVRANGE gives them).
  local s, m = ARGV[9], ARGV[10]
  local now = redis.call('ZSCORE', key, m)
  if now and tonumber(now) == tonumber(s) then
    rank = redis.call('ZREVRANK', key, m) + 1
  else
    rank = redis.call('ZCOUNT', key, '(' .. s, '+inf')
    for _, tie in ipairs(redis.call('ZRANGE', key, s, s, 'BYSCORE', 'LIMIT', 0, max_ties)) do
      if tie >= m then rank = rank + 1 end
    end
  end
end
-- Net-vote rankings hold the post time in the low bits of their scores: members
-- older than the period (not pruned yet) are skipped, within a budget.
local out, scanned = {}, 0
while #out < 2 * want and scanned < feed_scan do
  local batch = redis.call('ZRANGE', key, rank, rank + want - 1, 'REV', 'WITHSCORES')
  if #batch == 0 then break end
  for i = 1, #batch, 2 do
    local v = tonumber(batch[i + 1])
    local fresh = min_time == 0 or v - math.floor(v / top_step) * top_step >= min_time
    if fresh and #out < 2 * want then
      out[#out + 1] = batch[i]
      out[#out + 1] = batch[i + 1]
    end
  end
  scanned = scanned + #batch / 2
  rank = rank + #batch / 2
end
return {redis.call('ZCARD', key), out}
