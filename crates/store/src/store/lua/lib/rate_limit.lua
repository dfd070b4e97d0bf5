-- One fixed-window counter, shared by the rate-limited scripts, which call
-- it before writing anything else, so a refused write changes nothing but
-- the counter.
--
-- rate_limit(key, limit, window) counts a call (INCR), starts the window on
-- the first one (EXPIRE), and returns 0 when the call is within limit, else
-- the seconds left in the window (at least 1). A counter found without a
-- TTL (written by hand) gets the window again rather than blocking forever.
-- A limit of 0 counts nothing: the call was counted on another shard.
local function rate_limit(key, limit, window)
  if limit == '0' then return 0 end
  local n = redis.call('INCR', key)
  if n == 1 then redis.call('EXPIRE', key, window) end
  if n <= tonumber(limit) then return 0 end
  local ttl = redis.call('TTL', key)
  if ttl < 0 then
    redis.call('EXPIRE', key, window)
    ttl = tonumber(window)
  end
  if ttl < 1 then ttl = 1 end
  return ttl
end
