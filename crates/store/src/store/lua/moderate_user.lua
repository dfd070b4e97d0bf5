-- Bans or unbans a user, or sets their role, with the log entry (see
-- scripts/moderation.rs). Sessions read both from the account; a ban
-- announces the user's sessions as ended, which closes their sockets.
-- Needs rate_limit, karma, group_sizes and moderation.
--
-- KEYS: common, then [12] the account, [13] its sessions, [14] the
-- caller's counter, [15] the action's index, [16] the user's log, [17]
-- this shard's admins, [18] the newest guard number that counted them.
-- ARGV: common (the caller, '' for the command line; the reason), then
-- [36] the user's name, [37] 'ban', 'unban' or 'role', [38] [39] the rate
-- limit and its window ('0': not counted here), [40] the action's name,
-- [41] the caller's role, [42] the ban's end (Unix seconds, or 'forever')
-- or the new role, [43] the session prefix, [44] the channel of ended
-- sessions, [45] the admins of the other shards and [46] the number of
-- the guard that counted them ('': none needed; '?': not counted yet).
--
-- On a cluster, an action that removes an admin runs only under the
-- newest guard that counted this shard: uncounted, or under an older
-- one, whose count of the other shards may miss an admin removed since,
-- it answers 'recount', writing nothing, and the caller counts.
local c = moderation_context()
local account, sessions, admins, newest = KEYS[12], KEYS[13], KEYS[17], KEYS[18]
local name, op, value, prefix, guard = ARGV[36], ARGV[37], ARGV[42], ARGV[43], ARGV[46]
local h = redis.call('HMGET', account, 'role', 'banned_until')
local role = h[1] or 'member'
local removes_admin = role == 'admin' and (op == 'ban' or (op == 'role' and value ~= 'admin'))
local guarded = guard ~= '' and removes_admin
if guarded and (guard == '?' or (tonumber(redis.call('GET', newest)) or 0) > tonumber(guard)) then
  return {'recount'}
end
local wait = rate_limit(KEYS[14], ARGV[38], ARGV[39])
if wait > 0 then return {'limited', wait} end
if redis.call('EXISTS', account) == 0 then return {'missing'} end
local last_admin = role == 'admin' and redis.call('SCARD', admins) + tonumber(ARGV[45]) <= 1
local entry = {action = ARGV[40], index = KEYS[15], subject = KEYS[16], moderator = c.actor,
  user = name}
if op == 'role' then
  if role == value then return {'same'} end
  if last_admin and c.actor ~= '' then return {'last-admin'} end
  if value == 'member' then redis.call('HDEL', account, 'role') else redis.call('HSET', account, 'role', value) end
  if value == 'admin' then redis.call('SADD', admins, name) else redis.call('SREM', admins, name) end
else
  if name == c.actor then return {'self'} end
  if role ~= 'member' and ARGV[41] ~= 'admin' then return {'forbidden'} end
  if op == 'ban' then
    if last_admin then return {'last-admin'} end
    if h[2] == value then return {'same'} end
    -- Ends every session started before now (see lib/session.lua).
    redis.call('HSET', account, 'banned_until', value, 'banned_at', c.ms)
    announce_sessions(sessions, prefix, ARGV[44])
    if value ~= 'forever' then entry.ends = value end
  else
    if not h[2] then return {'same'} end
    redis.call('HDEL', account, 'banned_until')
  end
end
if guarded then redis.call('SET', newest, guard) end
log_entry(c, entry)
announce(c, {user = name})
return {'ok'}
