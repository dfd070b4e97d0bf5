-- Bans or unbans a user, or sets their role, with the log entry; the
-- user's sessions follow in the same step (see scripts/moderation.rs).
-- Needs rate_limit, karma and moderation.
--
-- KEYS: common, then [12] the account, [13] its sessions, [14] the
-- caller's counter, [15] the action's index, [16] the user's log, [17]
-- the admins.
-- ARGV: common (the caller, '' for the command line; the reason), then
-- [32] the user's name, [33] 'ban', 'unban' or 'role', [34] [35] the rate
-- limit and its window (empty: not counted), [36] the action's name,
-- [37] the caller's role, [38] the ban's end (Unix seconds, or 'forever')
-- or the new role, [39] the session prefix, [40] the channel of ended
-- sessions.
local c = moderation_context()
local account, sessions, admins = KEYS[12], KEYS[13], KEYS[17]
local name, op, value, prefix = ARGV[32], ARGV[33], ARGV[38], ARGV[39]
if ARGV[34] ~= '' then
  local wait = rate_limit(KEYS[14], ARGV[34], ARGV[35])
  if wait > 0 then return {'limited', wait} end
end
if redis.call('EXISTS', account) == 0 then return {'missing'} end
local h = redis.call('HMGET', account, 'role', 'banned_until')
local role = h[1] or 'member'
local last_admin = role == 'admin' and redis.call('SCARD', admins) <= 1
local entry = {action = ARGV[36], index = KEYS[15], subject = KEYS[16], moderator = c.actor,
  user = name}
if op == 'role' then
  if role == value then return {'same'} end
  if last_admin and c.actor ~= '' then return {'last-admin'} end
  if value == 'member' then redis.call('HDEL', account, 'role') else redis.call('HSET', account, 'role', value) end
  if value == 'admin' then redis.call('SADD', admins, name) else redis.call('SREM', admins, name) end
  -- A banned user's sessions keep their ban; a login after it reads the role.
  if not h[2] then set_sessions(sessions, prefix, value == 'member' and name or name .. ' ' .. value) end
else
  if name == c.actor then return {'self'} end
  if role ~= 'member' and ARGV[37] ~= 'admin' then return {'forbidden'} end
  if op == 'ban' then
    if last_admin then return {'last-admin'} end
    if h[2] == value then return {'same'} end
    redis.call('HSET', account, 'banned_until', value)
    set_sessions(sessions, prefix, name .. ' banned ' .. value, ARGV[40])
    if value ~= 'forever' then entry.ends = value end
  else
    if not h[2] then return {'same'} end
    redis.call('HDEL', account, 'banned_until')
    set_sessions(sessions, prefix, false)
  end
end
log_entry(c, entry)
announce(c, {user = name})
return {'ok'}
