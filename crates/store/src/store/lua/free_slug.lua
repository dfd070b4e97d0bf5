-- Frees a slug in its shard's index (the cluster layout, see
-- scripts/slugs.rs), unless it now points to another article.
-- KEYS: [1] slug -> id. ARGV: [1] the slug, [2] the article id.
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then redis.call('HDEL', KEYS[1], ARGV[1]) end
return {'freed', 0}
