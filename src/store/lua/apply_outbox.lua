-- Applies changes queued in other shards' outboxes (see outbox.rs): a
-- poster's karma, a group's size. Each is applied once: KEYS[3] keeps,
-- per source shard, the id of the last entry applied here, and a drain
-- hands entries over in their stream's order, so an entry at or before
-- that id was applied already. Needs karma and group_sizes.
--
-- KEYS: [1] this shard's karma:, [2] its slice of the group directory,
-- [3] the applied ids.
-- ARGV: [1] the source shard, then per entry its id, 'karma' or 'group',
-- the member or group, the delta and the time.
local karma, directory, applied, source = KEYS[1], KEYS[2], KEYS[3], ARGV[1]

-- Stream ids are '<ms>-<seq>'.
local function later(a, b)
  local a_ms, a_seq = string.match(a, '^(%d+)-(%d+)$')
  local b_ms, b_seq = string.match(b, '^(%d+)-(%d+)$')
  if tonumber(a_ms) ~= tonumber(b_ms) then return tonumber(a_ms) > tonumber(b_ms) end
  return tonumber(a_seq) > tonumber(b_seq)
end

local last = redis.call('HGET', applied, source) or '0-0'
local n = 0
for i = 2, #ARGV, 5 do
  if later(ARGV[i], last) then
    local delta = tonumber(ARGV[i + 3])
    if ARGV[i + 1] == 'karma' then
      add_karma(karma, ARGV[i + 2], delta, tonumber(ARGV[i + 4]))
    else
      resize_group(directory, ARGV[i + 2], delta)
    end
    last = ARGV[i]
    n = n + 1
  end
end
redis.call('HSET', applied, source, last)
return {'applied', n}
