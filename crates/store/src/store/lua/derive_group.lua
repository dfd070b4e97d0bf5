-- Follows one group's article set, as any client writes it (the book's
-- add_remove_groups included), into what votegraph derives from it (see
-- scripts/derive.rs): each article's group set, the group directory, and
-- the group's cached rankings (dropped when its articles change, so the
-- next read builds them anew). The articles whose group sets changed are
-- answered: their hashes' groups fields are rebuilt by the article
-- derivation, once for all the groups that named them.
--
-- The mirror set holds the articles whose group lists name the group; a
-- difference between it and the group's set is what is left to follow.
-- votegraph's own post and set-groups scripts write the mirror with the
-- group, so their changes leave nothing to do.
--
-- KEYS[4..] are the group's cached rankings, ARGV[8..] the candidates
-- (articles touched with the group, as members). The modes are described
-- by GroupMode in scripts/derive.rs. Answers {'synced', ids...}, {'scan',
-- ids...} or {'cursor', next, ids...}, with the ids of the articles whose
-- group sets changed.
local group, mirror, directory = KEYS[1], KEYS[2], KEYS[3]
local name, article_prefix, groups_suffix, mode = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local batch, whole = tonumber(ARGV[6]), tonumber(ARGV[7])
local moved, changed = false, {}
local function relist(member, add)
  moved = true
  if string.sub(member, 1, #article_prefix) ~= article_prefix then return end
  local groups_key = member .. groups_suffix
  if add then redis.call('SADD', groups_key, name) else redis.call('SREM', groups_key, name) end
  local id = string.sub(member, #article_prefix + 1)
  if string.match(id, '^[1-9]%d*$') then changed[#changed + 1] = id end
end
local function add(member)
  -- An article a moderator took out keeps the group for its restore only.
  local out = string.sub(member, 1, #article_prefix) == article_prefix
    and redis.call('HEXISTS', member, 'status') == 1
  if out then
    redis.call('SREM', group, member)
    relist(member, true)
  elseif redis.call('SADD', mirror, member) == 1 then
    relist(member, true)
  end
end
local function remove(member)
  if redis.call('SREM', mirror, member) == 1 then relist(member, false) end
end
local function finish(status, ...)
  if moved then
    for i = 4, #KEYS do redis.call('DEL', KEYS[i]) end
  end
  local n = redis.call('SCARD', group)
  local listed = redis.call('ZSCORE', directory, name)
  if n == 0 then
    if listed then redis.call('ZREM', directory, name) end
  elseif tonumber(listed) ~= -n then
    redis.call('ZADD', directory, -n, name)
  end
  local reply = {status}
  for _, v in ipairs({...}) do reply[#reply + 1] = v end
  for _, id in ipairs(changed) do reply[#reply + 1] = id end
  return reply
end
local function compare_whole()
  for _, m in ipairs(redis.call('SDIFF', group, mirror)) do add(m) end
  for _, m in ipairs(redis.call('SDIFF', mirror, group)) do remove(m) end
end
if mode == 'check' or mode == 'full' then
  for i = 8, #ARGV do
    local m = ARGV[i]
    if redis.call('SISMEMBER', group, m) == 1 then add(m) else remove(m) end
  end
  local size, mirrored = redis.call('SCARD', group), redis.call('SCARD', mirror)
  if mode == 'check' and size == mirrored then return finish('synced') end
  if size + mirrored > whole then return finish('scan') end
  compare_whole()
  return finish('synced')
end
if mode == 'add' then
  local scan = redis.call('SSCAN', group, ARGV[5], 'COUNT', batch)
  for _, m in ipairs(scan[2]) do
    if redis.call('SISMEMBER', mirror, m) == 0 then add(m) end
  end
  return finish('cursor', scan[1])
end
local scan = redis.call('SSCAN', mirror, ARGV[5], 'COUNT', batch)
for _, m in ipairs(scan[2]) do
  if redis.call('SISMEMBER', group, m) == 0 then remove(m) end
end
return finish('cursor', scan[1])
