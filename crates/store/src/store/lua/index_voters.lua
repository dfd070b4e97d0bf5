-- Indexes one batch of a large voted set's voters (see scripts/derive.rs),
-- for an article with more voters than derive_articles indexes at once.
-- Needs index_time and voters. The snapshot, when not empty, is recorded
-- in the hash's indexed field once the scan ends.
local article, set, by_time = KEYS[1], KEYS[2], KEYS[3]
local c = { user_prefix = ARGV[1], user_votes_suffix = ARGV[2], week = tonumber(ARGV[3]) }
local sign, cursor, batch, snapshot = ARGV[4], ARGV[5], tonumber(ARGV[6]), ARGV[7]
local posted = redis.call('ZSCORE', by_time, article)
if not posted or not tonumber(posted) then return {'indexed', '0', 0} end
local scan = redis.call('SSCAN', set, cursor, 'COUNT', batch)
local written = index_members(c, article, tonumber(posted), scan[2], sign)
if scan[1] == '0' and snapshot ~= '' then
  redis.call('HSET', article, 'indexed', snapshot)
end
return {'indexed', scan[1], written}
