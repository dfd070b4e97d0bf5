-- Applies changes queued in other shards' outboxes (see outbox.rs): a
-- poster's karma, a group's size, a voter's vote in their index. Each is
-- applied once: KEYS[3] keeps, per source shard, the id of the last entry
-- applied here, and a drain hands entries over in their stream's order, so
-- an entry at or before that id was applied already. A vote its write
-- applied ahead is not applied again (see lib/queued_vote.lua). Needs
-- karma, group_sizes, index_time, vote_index and queued_vote.
--
-- KEYS: [1] this shard's karma:, [2] its slice of the group directory,
-- [3] the applied ids.
-- ARGV: [1] the source shard, [2] this shard's tag, [3] the vote index's
-- suffix, [4] the suffix of its votes applied ahead, [5] the voting window
-- in seconds, then per entry its id, 'karma', 'group' or 'vote', the
-- member, group or voter, the article (votes only), the delta (a vote's
-- index value) and the time.
local karma, directory, applied, source = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
local tag, votes_suffix, ahead_suffix, week = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])

local last = redis.call('HGET', applied, source) or '0-0'
local n = 0
for i = 6, #ARGV, 6 do
  if later(ARGV[i], last) then
    local kind, whose, delta, at = ARGV[i + 1], ARGV[i + 2], ARGV[i + 4], tonumber(ARGV[i + 5])
    if kind == 'karma' then
      add_karma(karma, whose, tonumber(delta), at)
    elseif kind == 'vote' then
      local index = tag .. whose .. votes_suffix
      apply_drained(index, tag .. whose .. ahead_suffix, ARGV[i], ARGV[i + 3], delta, at, week)
    else
      resize_group(directory, whose, tonumber(delta))
    end
    last = ARGV[i]
    n = n + 1
  end
end
redis.call('HSET', applied, source, last)
return {'applied', n}
