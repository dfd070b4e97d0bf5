-- Indexes one batch of a large voted set's voters (see scripts/derive.rs),
-- for an article with more voters than derive_articles indexes at once.
-- Needs index_time and voters.
--
-- KEYS: [1] the article, [2] the voted set (upvoters or downvoters), [3] the
-- time ranking.
-- ARGV: [1] the user prefix, [2] the suffix of a user's vote index, [3] the
-- voting window in seconds, [4] '' for upvoters, '-' for downvoters,
-- [5] the SSCAN cursor, [6] the batch size, [7] the sizes of the voted sets
-- to record in the hash's indexed field once the scan ends ('': not yet).
-- Answers {'indexed', next cursor ('0' at the end), entries written}.
local article, set, by_time = KEYS[1], KEYS[2], KEYS[3]
local c = { user_prefix = ARGV[1], user_votes_suffix = ARGV[2], week = tonumber(ARGV[3]) }
local posted = redis.call('ZSCORE', by_time, article)
if not posted or not tonumber(posted) then return {'indexed', '0', 0} end
local scan = redis.call('SSCAN', set, ARGV[5], 'COUNT', tonumber(ARGV[6]))
local written = index_members(c, article, tonumber(posted), scan[2], ARGV[4])
if scan[1] == '0' and ARGV[7] ~= '' then
  redis.call('HSET', article, 'indexed', ARGV[7])
end
return {'indexed', scan[1], written}
