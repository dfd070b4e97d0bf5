//! The Lua scripts behind every multi-key write.
//!
//! A script runs atomically in Redis, so a vote, a post or a group change
//! happens entirely or not at all, even with many servers and voters racing.
//! `redis::Script` calls them by SHA (EVALSHA) and loads them again by itself
//! when Redis answers NOSCRIPT, e.g. after a restart. Time comes from Redis'
//! own clock (`TIME`) so that every server instance agrees on it.

use std::sync::LazyLock;

use redis::Script;

use super::keys;

/// Lua shared by the scripts that change karma.
///
/// `karma:` scores fold a tie-break into the karma (seed 004): the integer part
/// is the karma, the fraction is `(2^32 - 1 - t) / 2^32` where `t` is whole
/// seconds since 2020-01-01 when the user reached that karma. An earlier `t`
/// gives a larger fraction, so a plain ZREVRANGE ranks by karma, then by who
/// got there first. The fraction is a multiple of 2^-32, which a double holds
/// exactly next to any integer below 2^21 in magnitude: ±2,097,151 karma
/// points and 2^32 seconds (136 years, until 2156) keep the order exact.
/// `floor(score)` gives the karma back, negative karma included.
const KARMA_LUA: &str = r#"
local function karma_score(k, now)
  local t = math.floor(now) - 1577836800
  if t < 0 then t = 0 end
  if t > 4294967295 then t = 4294967295 end
  return string.format('%.17g', k + (4294967295 - t) / 4294967296)
end
local function add_karma(member, delta, now)
  if delta == 0 then return end
  local old = redis.call('ZSCORE', 'karma:', member)
  local k = (old and math.floor(tonumber(old)) or 0) + delta
  redis.call('ZADD', 'karma:', karma_score(k, now), member)
end
local function as_member(poster)
  if string.sub(poster, 1, 5) == 'user:' then return poster end
  return 'user:' .. poster
end
"#;

/// Builds a script, writing the book's numbers and the event channel from
/// [`keys`] into it, so they are defined once: `$WEEK` (the voting window in
/// seconds), `$VOTE_SCORE`, `$GROUP_CACHE_SECS`, `$SCORE_CHANNEL` and
/// `$SLUG_SUFFIXES`.
fn script(body: &str) -> Script {
    Script::new(
        &body
            .replace("$WEEK", &keys::VOTING_WINDOW_SECS.to_string())
            .replace("$VOTE_SCORE", &keys::VOTE_SCORE.to_string())
            .replace("$GROUP_CACHE_SECS", &keys::GROUP_CACHE_SECS.to_string())
            .replace("$SCORE_CHANNEL", keys::SCORE_CHANNEL)
            .replace("$SLUG_SUFFIXES", keys::SLUG_SUFFIXES),
    )
}

fn with_karma(body: &str) -> Script {
    script(&format!("{KARMA_LUA}{body}"))
}

/// ARGV: poster member, title, link, slug stem, group names…
/// Returns `{id, slug}`.
///
/// The slug is the stem, or `stem-2`, `stem-3`… reserved with HSETNX on
/// `slug.to.id` (seed 003), so concurrent posts never share one. The highest
/// suffix handed out per stem is kept in `slug:last-suffix`, so the
/// thousandth post of one title tries one slug, not a thousand.
pub static POST: LazyLock<Script> = LazyLock::new(|| {
    with_karma(
        r#"
local poster = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local id = redis.call('INCR', 'article:')
local article = 'article:' .. id
local voted = 'voted:' .. id
redis.call('SADD', voted, poster)
redis.call('EXPIRE', voted, $WEEK)
local stem = ARGV[4]
local slug = stem
if redis.call('HSETNX', 'slug.to.id', slug, id) == 0 then
  local n = tonumber(redis.call('HGET', '$SLUG_SUFFIXES', stem)) or 1
  repeat
    n = n + 1
    slug = stem .. '-' .. n
  until redis.call('HSETNX', 'slug.to.id', slug, id) == 1
  redis.call('HSET', '$SLUG_SUFFIXES', stem, n)
end
local ts = string.format('%.6f', now)
local score = string.format('%.6f', now + $VOTE_SCORE)
redis.call('HSET', article, 'title', ARGV[2], 'link', ARGV[3], 'poster', poster,
  'time', ts, 'votes', 1, 'downvotes', 0, 'slug', slug)
redis.call('ZADD', 'score:', score, article)
redis.call('ZADD', 'time:', ts, article)
redis.call('ZADD', poster .. ':articles:time', ts, article)
redis.call('ZADD', poster .. ':articles:score', score, article)
add_karma(poster, 1, now)
for i = 5, #ARGV do
  local g = ARGV[i]
  redis.call('SADD', 'group:' .. g, article)
  redis.call('SADD', article .. ':groups', g)
  if redis.call('EXISTS', 'score:' .. g) == 1 then redis.call('ZADD', 'score:' .. g, score, article) end
  if redis.call('EXISTS', 'time:' .. g) == 1 then redis.call('ZADD', 'time:' .. g, ts, article) end
end
return {id, slug}
"#,
    )
});

/// ARGV: article id, voter member, direction (`up`, `down` or `none`).
/// Returns `{status, previous direction, new score}` where status is
/// `missing`, `closed`, `same` or `changed`.
///
/// The voted sets keep the book's meaning: `voted:<id>` holds upvoters and
/// `downvoted:<id>` downvoters; a switch is one SMOVE. Both sets expire when
/// the voting window closes, as the book's `voted:<id>` does.
pub static VOTE: LazyLock<Script> = LazyLock::new(|| {
    with_karma(
        r#"
local id, voter, dir = ARGV[1], ARGV[2], ARGV[3]
local week = $WEEK
local article = 'article:' .. id
local posted = redis.call('ZSCORE', 'time:', article)
if not posted then
  if redis.call('EXISTS', article) == 0 then return {'missing'} end
  posted = redis.call('HGET', article, 'time')
end
posted = tonumber(posted)
if not posted then return {'missing'} end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
if now - posted >= week then return {'closed'} end

local up, down = 'voted:' .. id, 'downvoted:' .. id
local was = 'none'
if redis.call('SISMEMBER', up, voter) == 1 then was = 'up'
elseif redis.call('SISMEMBER', down, voter) == 1 then was = 'down' end
if was == dir then
  return {'same', was, redis.call('ZSCORE', 'score:', article)}
end

local dup, ddown = 0, 0
if was == 'up' then dup = -1 elseif was == 'down' then ddown = -1 end
if dir == 'up' then dup = dup + 1 elseif dir == 'down' then ddown = ddown + 1 end
local target = nil
if dir == 'up' then target = up elseif dir == 'down' then target = down end
if was == 'none' then
  redis.call('SADD', target, voter)
elseif dir == 'none' then
  redis.call('SREM', was == 'up' and up or down, voter)
else
  redis.call('SMOVE', was == 'up' and up or down, target, voter)
end
if target and redis.call('TTL', target) == -1 then
  redis.call('EXPIREAT', target, math.floor(posted + week) + 1)
end
if dup ~= 0 then redis.call('HINCRBY', article, 'votes', dup) end
if ddown ~= 0 then redis.call('HINCRBY', article, 'downvotes', ddown) end
local score = redis.call('ZINCRBY', 'score:', $VOTE_SCORE * (dup - ddown), article)
local poster = redis.call('HGET', article, 'poster')
if poster then
  poster = as_member(poster)
  add_karma(poster, dup - ddown, now)
  redis.call('ZADD', poster .. ':articles:score', 'XX', score, article)
end
local groups = redis.call('SMEMBERS', article .. ':groups')
for _, g in ipairs(groups) do
  redis.call('ZADD', 'score:' .. g, 'XX', score, article)
end
local counts = redis.call('HMGET', article, 'votes', 'downvotes')
-- cjson prints numbers with 14 digits; score and time go as exact strings.
redis.call('PUBLISH', '$SCORE_CHANNEL', cjson.encode({
  id = id, score = score, votes = tonumber(counts[1]) or 0,
  downvotes = tonumber(counts[2]) or 0, at = string.format('%.6f', now), groups = groups }))
return {'changed', was, score}
"#,
    )
});

/// ARGV: article id, caller member, number of groups to add, the groups to
/// add, then the groups to remove. Returns `missing`, `forbidden` or `ok`.
///
/// Cached group rankings (`score:<group>`, `time:<group>`) that exist are
/// updated in the same step, so a group page shows the change at once.
pub static SET_GROUPS: LazyLock<Script> = LazyLock::new(|| {
    script(
        r#"
local id, caller, nadd = ARGV[1], ARGV[2], tonumber(ARGV[3])
local article = 'article:' .. id
if redis.call('EXISTS', article) == 0 then return 'missing' end
local poster = redis.call('HGET', article, 'poster')
if poster ~= caller and ('user:' .. tostring(poster)) ~= caller then return 'forbidden' end
local score = redis.call('ZSCORE', 'score:', article)
local time = redis.call('ZSCORE', 'time:', article)
for i = 4, #ARGV do
  local g = ARGV[i]
  if i < 4 + nadd then
    redis.call('SADD', 'group:' .. g, article)
    redis.call('SADD', article .. ':groups', g)
    if score and redis.call('EXISTS', 'score:' .. g) == 1 then redis.call('ZADD', 'score:' .. g, score, article) end
    if time and redis.call('EXISTS', 'time:' .. g) == 1 then redis.call('ZADD', 'time:' .. g, time, article) end
  else
    redis.call('SREM', 'group:' .. g, article)
    redis.call('SREM', article .. ':groups', g)
    redis.call('ZREM', 'score:' .. g, article)
    redis.call('ZREM', 'time:' .. g, article)
  end
end
return 'ok'
"#,
    )
});

/// ARGV: group name, ranking key (`score:` or `time:`), start, stop, scan
/// budget. Returns the page's members.
///
/// A cached group ranking (`score:<group>`, kept current by the write
/// scripts) answers at once. Without one, a shallow page is found by walking
/// the global ranking from the top and keeping the group's members, which
/// costs about (stop + 1) × articles / group size membership checks: a few
/// dozen for a big group's first page. Only when that would pass the budget
/// is the ranking built with the book's `ZINTERSTORE … AGGREGATE MAX` and
/// cached 60 s, as in the book. Either way the order is the cached one's.
pub static GROUP_PAGE: LazyLock<Script> = LazyLock::new(|| {
    script(
        r#"
local group, ranking = 'group:' .. ARGV[1], ARGV[2]
local key = ranking .. ARGV[1]
local start, stop, budget = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
if redis.call('EXISTS', key) == 1 then
  return redis.call('ZREVRANGE', key, start, stop)
end
local size = redis.call('SCARD', group)
if size == 0 then return {} end
local total = redis.call('ZCARD', ranking)
local need = stop + 1
if need * total / size <= budget then
  local found, offset, chunk = {}, 0, 128
  while #found < need and offset < total and offset < 4 * budget do
    local batch = redis.call('ZREVRANGE', ranking, offset, offset + chunk - 1)
    if #batch == 0 then break end
    for _, member in ipairs(batch) do
      if redis.call('SISMEMBER', group, member) == 1 then
        found[#found + 1] = member
        if #found == need then break end
      end
    end
    offset = offset + #batch
    chunk = math.min(chunk * 2, 4096)
  end
  if #found == need or offset >= total then
    local page = {}
    for i = start + 1, #found do page[#page + 1] = found[i] end
    return page
  end
end
redis.call('ZINTERSTORE', key, 2, group, ranking, 'AGGREGATE', 'MAX')
redis.call('EXPIRE', key, $GROUP_CACHE_SECS)
return redis.call('ZREVRANGE', key, start, stop)
"#,
    )
});

/// KEYS: user hash, session key. ARGV: name, password hash, created, session TTL.
/// Creates the account and its first session together; returns 0 when the
/// name is taken.
pub static SIGN_UP: LazyLock<Script> = LazyLock::new(|| {
    script(
        r#"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'name', ARGV[1], 'password', ARGV[2], 'created', ARGV[3])
redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[4])
return 1
"#,
    )
});

/// KEYS: the name's attempt counter. ARGV: attempts allowed, window seconds.
/// Counts one logIn attempt before its password is checked, so concurrent
/// guesses cannot slip past the limit while the hash is verified. Returns 0
/// when the attempt may go ahead, else the seconds until the window ends.
pub static LOGIN_ATTEMPT: LazyLock<Script> = LazyLock::new(|| {
    script(
        r#"
local n = redis.call('INCR', KEYS[1])
local window = tonumber(ARGV[2])
if n == 1 then redis.call('EXPIRE', KEYS[1], window) end
if n <= tonumber(ARGV[1]) then return 0 end
local ttl = redis.call('TTL', KEYS[1])
if ttl < 0 then
  redis.call('EXPIRE', KEYS[1], window)
  ttl = window
end
if ttl < 1 then ttl = 1 end
return ttl
"#,
    )
});

/// ARGV: article id, caller member, new slug. Returns `missing`,
/// `forbidden`, `taken` or `ok`; the old slug is freed in the same step.
pub static RENAME_SLUG: LazyLock<Script> = LazyLock::new(|| {
    script(
        r#"
local id, caller, new = ARGV[1], ARGV[2], ARGV[3]
local article = 'article:' .. id
if redis.call('EXISTS', article) == 0 then return 'missing' end
local poster = redis.call('HGET', article, 'poster')
if poster ~= caller and ('user:' .. tostring(poster)) ~= caller then return 'forbidden' end
local old = redis.call('HGET', article, 'slug')
if old == new then return 'ok' end
local owner = redis.call('HGET', 'slug.to.id', new)
if owner and owner ~= id then return 'taken' end
redis.call('HSET', 'slug.to.id', new, id)
redis.call('HSET', article, 'slug', new)
if old then redis.call('HDEL', 'slug.to.id', old) end
return 'ok'
"#,
    )
});

/// ARGV: article id. Counts one view (HINCRBY on the article's `views`
/// field) and returns the new count, or -1 when there is no such article.
pub static VIEW: LazyLock<Script> = LazyLock::new(|| {
    script(
        r#"
local article = 'article:' .. ARGV[1]
if redis.call('EXISTS', article) == 0 then return -1 end
return redis.call('HINCRBY', article, 'views', 1)
"#,
    )
});

#[cfg(test)]
mod tests {
    /// The karma score of the Lua helper, in Rust's (IEEE-754) doubles,
    /// which are Lua's numbers too.
    fn karma_score(k: f64, t: f64) -> f64 {
        k + (4_294_967_295.0 - t) / 4_294_967_296.0
    }

    #[test]
    fn karma_scores_keep_their_order_at_the_documented_limits() {
        let max_t = 4_294_967_295.0;
        for k in [-2_097_151.0, -1.0, 0.0, 1.0, 1_000_000.0, 2_097_151.0] {
            // Adjacent seconds stay distinct and ordered, at both ends of time.
            for t in [0.0, 1.0, max_t - 1.0] {
                let earlier = karma_score(k, t);
                let later = karma_score(k, t + 1.0);
                assert!(earlier > later, "k={k} t={t}");
                assert_eq!(earlier.floor(), k, "the karma reads back, k={k} t={t}");
            }
            // Any time at karma k ranks below any time at k + 1.
            assert!(karma_score(k, 0.0) < karma_score(k + 1.0, max_t));
        }
        // Past the limit a second is lost: the bound is real.
        let k = 4_194_304.0; // 2^22
        assert_eq!(karma_score(k, 0.0), karma_score(k, 1.0));
    }
}
