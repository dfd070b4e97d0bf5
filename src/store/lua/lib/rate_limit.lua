-- One fixed-window counter, shared by the rate-limited scripts.
--
-- rate_limit(key, limit, window) counts a call (INCR), starts the window on
-- the first one (EXPIRE), and returns 0 and the call's number in the
-- window when the call is within limit, else the seconds left in the
-- window (at least 1). A counter found without a
-- TTL (left by a crash between the two commands of an older version, or
-- written by hand) gets the window again rather than blocking forever.
-- Calls over the limit are counted too; that changes nothing, as the window
-- ends at the same time.
--
-- Every rate-limited script calls it before writing anything else and
-- returns {'limited', seconds} (or its own status) when refused, so a
-- refused write changes nothing but the counter and costs the one round
-- trip of the script. The counter's key comes in KEYS, built by keys.rs.
local function rate_limit(key, limit, window)
  local n = redis.call('INCR', key)
  if n == 1 then redis.call('EXPIRE', key, window) end
  if n <= tonumber(limit) then return 0, n end
  local ttl = redis.call('TTL', key)
  if ttl < 0 then
    redis.call('EXPIRE', key, window)
    ttl = tonumber(window)
  end
  if ttl < 1 then ttl = 1 end
  return ttl
end
