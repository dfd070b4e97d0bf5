-- Counts one call against a rate limit on the counter's own shard, before
-- a script on another shard writes (see shards.rs). Needs rate_limit.
return {'counted', rate_limit(KEYS[1], ARGV[1], ARGV[2])}
