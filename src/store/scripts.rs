//! The Lua scripts behind every multi-key write.
//!
//! A script runs atomically in Redis, so a vote, a post or a group change
//! happens entirely or not at all, even with many servers and voters racing.
//! `redis::Script` calls them by SHA (EVALSHA) and loads them again by itself
//! when Redis answers NOSCRIPT, e.g. after a restart. Time comes from Redis'
//! own clock (`TIME`) so that every server instance agrees on it.

use std::sync::LazyLock;

use redis::{Script, Value};

use super::{keys, value_str};
use crate::error::{AppError, AppResult};

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
            .replace("$SLUG_SUFFIXES", keys::SLUG_SUFFIXES)
            .replace(
                "$MAX_GROUPS",
                &crate::domain::GroupName::MAX_PER_ARTICLE.to_string(),
            ),
    )
}

/// Lua shared by the rate-limited scripts: one fixed-window counter.
///
/// `rate_limit(key, limit, window)` counts a call (INCR), starts the window
/// on the first one (EXPIRE), and returns 0 when the call is within
/// `limit`, else the seconds left in the window (at least 1). A counter
/// found without a TTL (left by a crash between the two commands of an
/// older version, or written by hand) gets the window again rather than
/// blocking forever. Calls over the limit are counted too; that changes
/// nothing, as the window ends at the same time.
///
/// Every rate-limited script calls it before writing anything else and
/// returns `{'limited', seconds}` when refused, so a refused write changes
/// nothing but the counter and costs the one round trip of the script.
/// The counter's key comes in KEYS, built by `keys.rs`.
const RATE_LUA: &str = r#"
local function rate_limit(key, limit, window)
  local n = redis.call('INCR', key)
  if n == 1 then redis.call('EXPIRE', key, window) end
  if n <= tonumber(limit) then return 0 end
  local ttl = redis.call('TTL', key)
  if ttl < 0 then
    redis.call('EXPIRE', key, window)
    ttl = tonumber(window)
  end
  if ttl < 1 then ttl = 1 end
  return ttl
end
"#;

/// Lua shared by the scripts that change an article's groups: copies the
/// `article:<id>:groups` set into the hash's `groups` field, sorted and
/// joined with ',', which pages read with the rest of the hash.
const GROUP_LIST_LUA: &str = r#"
local function list_groups(article)
  local names = redis.call('SMEMBERS', article .. ':groups')
  table.sort(names)
  redis.call('HSET', article, 'groups', table.concat(names, ','))
end
"#;

fn with_karma(body: &str) -> Script {
    script(&format!("{KARMA_LUA}{RATE_LUA}{body}"))
}

fn with_rate_limit(body: &str) -> Script {
    script(&format!("{RATE_LUA}{body}"))
}

/// What a rate-limited script answered: refused by its limit, or its own
/// status word with the values after it.
#[derive(Debug)]
pub enum Reply {
    Limited { retry_after_secs: u64 },
    Status(String, Vec<Value>),
}

impl Reply {
    /// Reads `{'limited', seconds}` or `{status, values…}`.
    pub fn parse(reply: Value, script: &str) -> AppResult<Self> {
        let bad = |reply: &dyn std::fmt::Debug| {
            AppError::Internal(format!("{script} script answered {reply:?}"))
        };
        let Value::Array(mut items) = reply else {
            return Err(bad(&reply));
        };
        if items.is_empty() {
            return Err(bad(&items));
        }
        let rest = items.split_off(1);
        let Some(status) = value_str(&items[0]).map(str::to_owned) else {
            return Err(bad(&items));
        };
        if status != "limited" {
            return Ok(Reply::Status(status, rest));
        }
        match seconds(&rest) {
            Some(retry_after_secs) => Ok(Reply::Limited { retry_after_secs }),
            None => Err(bad(&rest)),
        }
    }
}

/// The positive number of seconds a rate-limited reply carries first.
pub fn seconds(values: &[Value]) -> Option<u64> {
    match values.first() {
        Some(Value::Int(secs)) if *secs > 0 => Some(*secs as u64),
        _ => None,
    }
}

/// KEYS: the poster's post counter. ARGV: poster member, title, link, slug
/// stem, posts allowed, window seconds, group names…
/// Returns `{'posted', id, slug}` or `{'limited', seconds}`.
///
/// The slug is the stem, or `stem-2`, `stem-3`… reserved with HSETNX on
/// `slug.to.id` (seed 003), so concurrent posts never share one. The highest
/// suffix handed out per stem is kept in `slug:last-suffix`, so the
/// thousandth post of one title tries one slug, not a thousand.
pub static POST: LazyLock<Script> = LazyLock::new(|| {
    with_karma(&[
        GROUP_LIST_LUA,
        r#"
local poster = ARGV[1]
local wait = rate_limit(KEYS[1], ARGV[5], ARGV[6])
if wait > 0 then return {'limited', wait} end
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
for i = 7, #ARGV do
  local g = ARGV[i]
  redis.call('SADD', 'group:' .. g, article)
  redis.call('SADD', article .. ':groups', g)
  if redis.call('EXISTS', 'score:' .. g) == 1 then redis.call('ZADD', 'score:' .. g, score, article) end
  if redis.call('EXISTS', 'time:' .. g) == 1 then redis.call('ZADD', 'time:' .. g, ts, article) end
end
list_groups(article)
return {'posted', id, slug}
"#,
    ]
    .concat(),
    )
});

/// KEYS: the voter's vote counter. ARGV: article id, voter member,
/// direction (`up`, `down` or `none`), votes allowed, window seconds.
/// Returns `{'limited', seconds}` or `{status, previous direction, new
/// score}` where status is `missing`, `closed`, `same` or `changed`. Every
/// vote counts against the limit, whatever its outcome.
///
/// The voted sets keep the book's meaning: `voted:<id>` holds upvoters and
/// `downvoted:<id>` downvoters; a switch is one SMOVE. Both sets expire when
/// the voting window closes, as the book's `voted:<id>` does.
pub static VOTE: LazyLock<Script> = LazyLock::new(|| {
    with_karma(
        r#"
local id, voter, dir = ARGV[1], ARGV[2], ARGV[3]
local wait = rate_limit(KEYS[1], ARGV[4], ARGV[5])
if wait > 0 then return {'limited', wait} end
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

/// KEYS: the caller's set-groups counter. ARGV: article id, caller member,
/// number of groups to add, calls allowed, window seconds, the groups to
/// add, then the groups to remove. Returns `{'limited', seconds}`,
/// `{'missing'}`, `{'forbidden'}`, `{'too-many-groups'}` (the article would
/// be in more than `GroupName::MAX_PER_ARTICLE` groups; nothing is written)
/// or `{'ok'}`.
///
/// Cached group rankings (`score:<group>`, `time:<group>`) that exist are
/// updated in the same step, so a group page shows the change at once.
pub static SET_GROUPS: LazyLock<Script> = LazyLock::new(|| {
    with_rate_limit(&[
        GROUP_LIST_LUA,
        r#"
local id, caller, nadd = ARGV[1], ARGV[2], tonumber(ARGV[3])
local wait = rate_limit(KEYS[1], ARGV[4], ARGV[5])
if wait > 0 then return {'limited', wait} end
local article = 'article:' .. id
if redis.call('EXISTS', article) == 0 then return {'missing'} end
local poster = redis.call('HGET', article, 'poster')
if poster ~= caller and ('user:' .. tostring(poster)) ~= caller then return {'forbidden'} end
local count = redis.call('SCARD', article .. ':groups')
for i = 6, #ARGV do
  local member = redis.call('SISMEMBER', article .. ':groups', ARGV[i]) == 1
  if i < 6 + nadd and not member then count = count + 1 end
  if i >= 6 + nadd and member then count = count - 1 end
end
if count > $MAX_GROUPS then return {'too-many-groups'} end
local score = redis.call('ZSCORE', 'score:', article)
local time = redis.call('ZSCORE', 'time:', article)
for i = 6, #ARGV do
  local g = ARGV[i]
  if i < 6 + nadd then
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
list_groups(article)
return {'ok'}
"#,
    ]
    .concat(),
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

/// KEYS: user hash, session key, the client address' sign-up counter.
/// ARGV: name, password hash, created, session TTL, sign-ups allowed,
/// window seconds. Creates the account and its first session together.
/// Returns `{'limited', seconds}`, `{'taken'}` or `{'created'}`; a taken
/// name counts against the limit too, which slows down probing for names.
pub static SIGN_UP: LazyLock<Script> = LazyLock::new(|| {
    with_rate_limit(
        r#"
local wait = rate_limit(KEYS[3], ARGV[5], ARGV[6])
if wait > 0 then return {'limited', wait} end
if redis.call('EXISTS', KEYS[1]) == 1 then return {'taken'} end
redis.call('HSET', KEYS[1], 'name', ARGV[1], 'password', ARGV[2], 'created', ARGV[3])
redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[4])
return {'created'}
"#,
    )
});

/// KEYS: the name's attempt counter, the client address' attempt counter.
/// ARGV: attempts allowed per name, its window, attempts allowed per
/// address, its window. Counts one logIn attempt before its password is
/// checked, so concurrent guesses cannot slip past the limits while the
/// hash is verified. Returns `{'ok'}` when the attempt may go ahead, else
/// `{'address', seconds}` or `{'name', seconds}`: which limit refused it
/// and how long until its window ends. An
/// attempt refused by its address is not counted against the name: it
/// never reached a password check.
pub static LOGIN_ATTEMPT: LazyLock<Script> = LazyLock::new(|| {
    with_rate_limit(
        r#"
local wait = rate_limit(KEYS[2], ARGV[3], ARGV[4])
if wait > 0 then return {'address', wait} end
wait = rate_limit(KEYS[1], ARGV[1], ARGV[2])
if wait > 0 then return {'name', wait} end
return {'ok'}
"#,
    )
});

/// KEYS: the caller's rename counter. ARGV: article id, caller member, new
/// slug, renames allowed, window seconds. Returns `{'limited', seconds}`,
/// `{'missing'}`, `{'forbidden'}`, `{'taken'}` or `{'ok'}`; the old slug is
/// freed in the same step.
pub static RENAME_SLUG: LazyLock<Script> = LazyLock::new(|| {
    with_rate_limit(
        r#"
local id, caller, new = ARGV[1], ARGV[2], ARGV[3]
local wait = rate_limit(KEYS[1], ARGV[4], ARGV[5])
if wait > 0 then return {'limited', wait} end
local article = 'article:' .. id
if redis.call('EXISTS', article) == 0 then return {'missing'} end
local poster = redis.call('HGET', article, 'poster')
if poster ~= caller and ('user:' .. tostring(poster)) ~= caller then return {'forbidden'} end
local old = redis.call('HGET', article, 'slug')
if old == new then return {'ok'} end
local owner = redis.call('HGET', 'slug.to.id', new)
if owner and owner ~= id then return {'taken'} end
redis.call('HSET', 'slug.to.id', new, id)
redis.call('HSET', article, 'slug', new)
if old then redis.call('HDEL', 'slug.to.id', old) end
return {'ok'}
"#,
    )
});

/// KEYS: the viewer's view counter, the article's viewer set. ARGV:
/// article id, viewer member (`user:<name>` or `client:<ip>`), views
/// allowed, window seconds, view window seconds.
///
/// Counts a view (HINCRBY on the article's `views` field) once per viewer
/// per view window: the viewer set remembers who was counted and expires
/// with the window, which the first counted view after it starts. Returns
/// `{'missing'}`, `{'repeat'}` when the viewer was already counted,
/// `{'limited', seconds}`, or `{'counted'}`.
///
/// Only a view that would be counted uses the rate limit: a repeat writes
/// nothing (reading an article is not limited either), and checking the
/// set first means a reader who reopens the same article is never refused.
pub static VIEW: LazyLock<Script> = LazyLock::new(|| {
    with_rate_limit(
        r#"
local article = 'article:' .. ARGV[1]
if redis.call('EXISTS', article) == 0 then return {'missing'} end
if redis.call('SISMEMBER', KEYS[2], ARGV[2]) == 1 then return {'repeat'} end
local wait = rate_limit(KEYS[1], ARGV[3], ARGV[4])
if wait > 0 then return {'limited', wait} end
redis.call('SADD', KEYS[2], ARGV[2])
if redis.call('TTL', KEYS[2]) < 0 then redis.call('EXPIRE', KEYS[2], ARGV[5]) end
redis.call('HINCRBY', article, 'views', 1)
return {'counted'}
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
