-- Applies changes queued in other shards' outboxes (see outbox.rs): a
-- poster's karma, a group's size, a voter's vote in their index. Each is
-- applied once: KEYS[3] keeps, per source shard, the id of the last entry
-- applied here, and a drain hands entries over in their stream's order, so
-- an entry at or before that id was applied already. Needs karma,
-- group_sizes, index_time and vote_index.
--
-- KEYS: [1] this shard's karma:, [2] its slice of the group directory,
-- [3] the applied ids.
-- ARGV: [1] the source shard, [2] this shard's tag, [3] the vote index's
-- suffix, [4] the voting window in seconds, then per entry its id, 'karma',
-- 'group' or 'vote', the member, group or voter, the article (votes only),
-- the delta (a vote's index value) and the time.
local karma, directory, applied, source = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
local tag, votes_suffix, week = ARGV[2], ARGV[3], tonumber(ARGV[4])

-- Stream ids are '<ms>-<seq>'.
local function later(a, b)
  local a_ms, a_seq = string.match(a, '^(%d+)-(%d+)$')
  local b_ms, b_seq = string.match(b, '^(%d+)-(%d+)$')
  if tonumber(a_ms) ~= tonumber(b_ms) then return tonumber(a_ms) > tonumber(b_ms) end
  return tonumber(a_seq) > tonumber(b_seq)
end

local last = redis.call('HGET', applied, source) or '0-0'
local n = 0
for i = 5, #ARGV, 6 do
  if later(ARGV[i], last) then
    local kind, whose, delta, at = ARGV[i + 1], ARGV[i + 2], ARGV[i + 4], tonumber(ARGV[i + 5])
    if kind == 'karma' then
      add_karma(karma, whose, tonumber(delta), at)
    elseif kind == 'vote' then
      set_vote(tag .. whose .. votes_suffix, ARGV[i + 3], delta, at, week)
    else
      resize_group(directory, whose, tonumber(delta))
    end
    last = ARGV[i]
    n = n + 1
  end
end
redis.call('HSET', applied, source, last)
return {'applied', n}
