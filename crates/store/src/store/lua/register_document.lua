-- Registers an automatic persisted query's document (see
-- scripts/documents.rs, which says how it is bounded and why). Needs
-- rate_limit. ARGV[8] is the share of maxmemory (percent) past which new
-- documents are refused.
local document, index, by_address, by_site = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local ttl, max = tonumber(ARGV[2]), tonumber(ARGV[3])
local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', index, '-inf', now - ttl)
if not redis.call('ZSCORE', index, document) then
  local info = redis.call('INFO', 'memory')
  local used = tonumber(string.match(info, 'used_memory:(%d+)'))
  local limit = tonumber(string.match(info, 'maxmemory:(%d+)'))
  if used and limit and limit > 0 and used * 100 >= limit * tonumber(ARGV[8]) then
    return {'memory'}
  end
  local wait = rate_limit(by_address, ARGV[4], ARGV[5])
  if wait > 0 then return {'address', wait} end
  wait = rate_limit(by_site, ARGV[6], ARGV[7])
  if wait > 0 then return {'site', wait} end
  local over = redis.call('ZCARD', index) - max + 1
  if over > 0 then
    local oldest = redis.call('ZPOPMIN', index, over)
    for i = 1, #oldest, 2 do redis.call('DEL', oldest[i]) end
  end
end
local last = redis.call('ZRANGE', index, -1, -1, 'WITHSCORES')
if last[2] and tonumber(last[2]) >= now then now = tonumber(last[2]) + 0.000001 end
redis.call('SET', document, ARGV[1], 'EX', ttl)
redis.call('ZADD', index, now, document)
return {'ok'}
