-- session_user(session, user_prefix): who the session key belongs to as
-- its account stands now, or nil for no session or an ended one.
--
-- A session holds its user's name and when it started (`<name> <ms>`);
-- the role and the ban are read from the account on every use, so no
-- change to either can miss a session. A ban ends the sessions started
-- before it (`banned_at`): they answer {'banned', name, end} while it
-- lasts (Unix seconds, or 'forever') and nothing after. Values written
-- before sessions held their start (`<name> <role>`, `<name> banned <end>`)
-- count as started at 0.
local function session_user(session, user_prefix)
  local value = redis.call('GET', session)
  if not value then return nil end
  local name, rest = string.match(value, '^(%S+)%s*(%S*)')
  local account = redis.call('HMGET', user_prefix .. name, 'role', 'banned_until', 'banned_at')
  local ban = account[2]
  if ban and (ban == 'forever' or tonumber(ban) > tonumber(redis.call('TIME')[1])) then
    return {'banned', name, ban}
  end
  local started = tonumber(rest) or 0
  local banned_at = tonumber(account[3]) or (rest == 'banned' and math.huge or -1)
  if started <= banned_at then return nil end
  return {'active', name, account[1] or 'member'}
end

-- session_value(name): the value of a session of `name` starting now.
local function session_value(name)
  local t = redis.call('TIME')
  return name .. ' ' .. (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
end
