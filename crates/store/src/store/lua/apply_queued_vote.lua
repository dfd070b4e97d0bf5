-- Applies a vote its write queued in its shard's outbox (see outbox.rs) to
-- the voter's index on this shard at once, before the write answers; the
-- drain then skips it (see lib/queued_vote.lua). Needs index_time,
-- vote_index and queued_vote.
--
-- KEYS: [1] the voter's index, [2] its votes applied ahead, [3] the ids of
-- the last entries applied here from each shard.
-- ARGV: [1] the source shard, [2] the entry's id, [3] the article, [4] the
-- index value, [5] the vote's time, [6] the voting window in seconds.
local index, ahead, applied = KEYS[1], KEYS[2], KEYS[3]
local drained = redis.call('HGET', applied, ARGV[1]) or '0-0'
local n = apply_ahead(index, ahead, drained, ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]),
  tonumber(ARGV[6]))
return {'applied', n}
