-- One page of a group's ranking (see scripts/groups.rs), walking the
-- global ranking within a budget of membership checks, else built.
local group, ranking, cached = KEYS[1], KEYS[2], KEYS[3]
local start, stop, budget = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local cache_secs = tonumber(ARGV[4])
if redis.call('EXISTS', cached) == 1 then
  return redis.call('ZREVRANGE', cached, start, stop, 'WITHSCORES')
end
local size = redis.call('SCARD', group)
if size == 0 then return {} end
local total = redis.call('ZCARD', ranking)
local need = stop + 1
if need * total / size <= budget then
  local found, scores, offset, chunk = {}, {}, 0, 128
  while #found < need and offset < total and offset < 4 * budget do
    local batch = redis.call('ZREVRANGE', ranking, offset, offset + chunk - 1, 'WITHSCORES')
    if #batch == 0 then break end
    for i = 1, #batch, 2 do
      if redis.call('SISMEMBER', group, batch[i]) == 1 then
        found[#found + 1] = batch[i]
        scores[#scores + 1] = batch[i + 1]
        if #found == need then break end
      end
    end
    offset = offset + #batch / 2
    chunk = math.min(chunk * 2, 4096)
  end
  if #found == need or offset >= total then
    local page = {}
    for i = start + 1, #found do
      page[#page + 1] = found[i]
      page[#page + 1] = scores[i]
    end
    return page
  end
end
redis.call('ZINTERSTORE', cached, 2, group, ranking, 'WEIGHTS', 0, 1)
redis.call('EXPIRE', cached, cache_secs)
return redis.call('ZREVRANGE', cached, start, stop, 'WITHSCORES')
