-- A vote queued in an outbox for its voter's index on another shard (the
-- cluster layout, see outbox.rs) reaches the index twice: at once, applied
-- by the write that queued it before it answers ("ahead"), and later by
-- the drain. In whichever order they come, the index ends with the
-- voter's newest vote: `ahead` (user:<name>:votes:ahead) keeps, per
-- article, the id of the entry applied ahead, up to which the drain skips
-- that article's entries. Needs index_time and vote_index.

-- later(a, b): whether stream id a ('<ms>-<seq>') comes after b.
local function later(a, b)
  local a_ms, a_seq = string.match(a, '^(%d+)-(%d+)$')
  local b_ms, b_seq = string.match(b, '^(%d+)-(%d+)$')
  if tonumber(a_ms) ~= tonumber(b_ms) then return tonumber(a_ms) > tonumber(b_ms) end
  return tonumber(a_seq) > tonumber(b_seq)
end

-- apply_ahead(index, ahead, drained, entry, article, value, at, week): the
-- write's own application of its entry. drained is the last entry of the
-- entry's outbox the drain applied here. Nothing is written when the drain
-- got there first, or a later vote on the article was applied ahead.
-- Returns 1 when applied, else 0.
local function apply_ahead(index, ahead, drained, entry, article, value, at, week)
  local newest = redis.call('HGET', ahead, article)
  if not later(entry, drained) or (newest and not later(entry, newest)) then return 0 end
  set_vote(index, article, value, at, week)
  redis.call('HSET', ahead, article, entry)
  keep_index(ahead, string.format('%d', week))
  return 1
end

-- apply_drained(index, ahead, entry, article, value, at, week): the
-- drain's application, in its outbox's order. An entry up to the one
-- applied ahead is not applied again (an earlier one would undo a newer
-- vote); reaching it, the drain forgets it.
local function apply_drained(index, ahead, entry, article, value, at, week)
  local newest = redis.call('HGET', ahead, article)
  if newest and later(newest, entry) then return end
  if newest then redis.call('HDEL', ahead, article) end
  if newest ~= entry then set_vote(index, article, value, at, week) end
end
