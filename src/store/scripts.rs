//! The Lua scripts behind every multi-key write, how each is called, and
//! what each answers.
//!
//! A script runs atomically in Redis, so a vote, a post or a group change
//! happens entirely or not at all, even with many servers and voters racing.
//! `redis::Script` calls them by SHA (EVALSHA) and loads them again by itself
//! when Redis answers NOSCRIPT, e.g. after a restart. Time comes from Redis'
//! own clock (`TIME`) so that every server instance agrees on it.
//!
//! **Keys.** No script spells a key name. Every key the caller can name is
//! passed in `KEYS`, built by `keys.rs`; keys a script only learns from data
//! it reads (a new article id, a voted article's groups, its poster) are
//! built in Lua from prefixes and suffixes passed in `ARGV`, whose values are
//! `keys.rs` constants. Each script's call function below is the one place
//! its `KEYS` and `ARGV` are laid out, next to the Lua that reads them; the
//! event channel comes in `ARGV` too. Only numbers (`$WEEK`, `$VOTE_SCORE`,
//! …) are written into the bodies when they are loaded. A unit test checks
//! that no string in any body looks like a key.
//!
//! **Replies.** Each script answers `{status, values…}` and has its own
//! reply type ([`VoteReply`], [`PostReply`], …), read in one place
//! ([`Lua::call`]); a reply no type knows is an [`AppError::Internal`],
//! logged with the script's name and never shown to the client.

use std::marker::PhantomData;
use std::sync::LazyLock;

use redis::{Script, ScriptInvocation, Value};

use super::articles::VoteDirection;
use super::keys::{self, Period, Ranking, RateAction};
use super::{value_f64, value_str, Conn};
use crate::config::RateLimit;
use crate::domain::{ArticleId, GroupName, Slug, UserName};
use crate::error::{AppError, AppResult};

/// A script's reply, read from what the script returned.
pub trait ScriptReply: Sized {
    /// None for a reply this version does not know, which is a bug.
    fn read(reply: &Value) -> Option<Self>;
}

/// A loaded script whose replies are read as `R`.
pub struct Lua<R> {
    name: &'static str,
    script: Script,
    /// A user's write: with `--wait-replicas`, its answer waits for the
    /// replicas (see [`Lua::call`]).
    write: bool,
    reply: PhantomData<fn() -> R>,
}

impl<R: ScriptReply> Lua<R> {
    /// Builds a script from `body`, writing the numbers defined in
    /// [`keys`] and the domain into it, so they are defined once: `$WEEK`
    /// (the voting window in seconds), `$VOTE_SCORE`, `$GROUP_CACHE_SECS`
    /// and `$MAX_GROUPS`. Names are never written in: they come in KEYS and
    /// ARGV.
    fn new(name: &'static str, body: &str) -> Self {
        let code = body
            .replace("$WEEK", &keys::VOTING_WINDOW_SECS.to_string())
            .replace("$VOTE_SCORE", &keys::VOTE_SCORE.to_string())
            .replace("$GROUP_CACHE_SECS", &keys::GROUP_CACHE_SECS.to_string())
            .replace("$MAX_GROUPS", &GroupName::MAX_PER_ARTICLE.to_string())
            .replace("$TOP_STEP", &format!("{:.0}", keys::TOP_STEP))
            .replace("$GROUP_KEYS", &GROUP_KEYS.to_string())
            .replace("$MAX_TIES", &MAX_TIES.to_string())
            .replace("$FEED_SCAN", &FEED_SCAN.to_string());
        Self {
            name,
            script: Script::new(&code),
            write: false,
            reply: PhantomData,
        }
    }

    /// A script that makes a user's write (see [`Lua::call`]).
    fn write(name: &'static str, body: &str) -> Self {
        Self {
            write: true,
            ..Self::new(name, body)
        }
    }

    fn invocation(&self) -> ScriptInvocation<'_> {
        self.script.prepare_invoke()
    }

    /// Runs the script (one EVALSHA, or EVAL after a NOSCRIPT) and reads
    /// its reply.
    ///
    /// A write, with `--wait-replicas N`, goes in one pipeline with `WAIT N
    /// timeout`: no extra round trip when the replicas keep up, and the
    /// answer comes only once they have it, or is `NOT_REPLICATED`. A
    /// pipelined script is not loaded again by redis-rs after `NOSCRIPT`
    /// (a restarted or new primary), so that is done here.
    async fn call(&self, invocation: &ScriptInvocation<'_>, conn: &mut Conn) -> AppResult<R> {
        let reply: Value = match (self.write, conn.wait()) {
            (true, Some((replicas, timeout))) => {
                waiting(invocation, conn, replicas, timeout).await?
            }
            _ => invocation.invoke_async(conn).await?,
        };
        R::read(&reply).ok_or_else(|| {
            AppError::Internal(format!("the {} script answered {reply:?}", self.name))
        })
    }
}

/// Runs a write script and `WAIT` in one pipeline (see [`Lua::call`]).
async fn waiting(
    invocation: &ScriptInvocation<'_>,
    conn: &mut Conn,
    replicas: u32,
    timeout: std::time::Duration,
) -> AppResult<Value> {
    let mut loaded = false;
    loop {
        let mut pipe = redis::pipe();
        pipe.invoke_script(invocation)
            .cmd("WAIT")
            .arg(replicas)
            .arg(timeout.as_millis() as u64);
        match pipe.query_async::<(Value, i64)>(conn).await {
            Ok((reply, acked)) if acked >= i64::from(replicas) => return Ok(reply),
            Ok((_, acked)) => {
                return Err(AppError::NotReplicated {
                    acked,
                    wanted: replicas,
                })
            }
            Err(e)
                if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
                    && !loaded =>
            {
                invocation.load_async(conn).await?;
                loaded = true;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Splits `{status, values…}`.
fn status(reply: &Value) -> Option<(&str, &[Value])> {
    let Value::Array(items) = reply else {
        return None;
    };
    let (status, values) = items.split_first()?;
    Some((value_str(status)?, values))
}

/// The positive number of seconds a refusal carries first.
fn seconds(values: &[Value]) -> Option<u64> {
    match values.first() {
        Some(Value::Int(secs)) if *secs > 0 => Some(*secs as u64),
        _ => None,
    }
}

/// Lua shared by the scripts that change karma.
///
/// `karma:` scores fold a tie-break into the karma: the integer part
/// is the karma, the fraction is `(2^32 - 1 - t) / 2^32` where `t` is whole
/// seconds since 2020-01-01 when the user reached that karma. An earlier `t`
/// gives a larger fraction, so a plain ZREVRANGE ranks by karma, then by who
/// got there first. The fraction is a multiple of 2^-32, which a double holds
/// exactly next to any integer below 2^21 in magnitude: ±2,097,151 karma
/// points and 2^32 seconds (136 years, until 2156) keep the order exact.
/// `floor(score)` gives the karma back, negative karma included.
///
/// `as_member` turns a `poster` field into the user's member: the book
/// stores whatever id its caller passes, votegraph `user:<name>`.
const KARMA_LUA: &str = r#"
local function karma_score(k, now)
  local t = math.floor(now) - 1577836800
  if t < 0 then t = 0 end
  if t > 4294967295 then t = 4294967295 end
  return string.format('%.17g', k + (4294967295 - t) / 4294967296)
end
local function add_karma(karma, member, delta, now)
  if delta == 0 then return end
  local old = redis.call('ZSCORE', karma, member)
  local k = (old and math.floor(tonumber(old)) or 0) + delta
  redis.call('ZADD', karma, karma_score(k, now), member)
end
local function as_member(poster, user_prefix)
  if string.sub(poster, 1, #user_prefix) == user_prefix then return poster end
  return user_prefix .. poster
end
"#;

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
local function list_groups(article, groups_key)
  local names = redis.call('SMEMBERS', groups_key)
  table.sort(names)
  redis.call('HSET', article, 'groups', table.concat(names, ','))
end
"#;

/// Lua shared by the scripts that cast a vote (vote, and post for the
/// poster's own upvote): keeps the voter's `user:<name>:votes` index.
///
/// `index_vote(index, article, posted, dir, now)` records the vote as
/// `article` → `+posted` (up) or `-posted` (down), or removes it (none). It
/// first drops the entries of articles whose voting has closed: an article
/// is closed once `now - posted >= $WEEK` (the vote script's own test), so
/// the closed ones score `[0, now - week]` as upvotes and `[-(now - week),
/// 0]` as downvotes, both bounds inclusive (no score is 0: post times are
/// positive). The index then expires a week after this vote, when every
/// article in it has closed. Together: it holds at most the user's votes of
/// one week. Scores are written with 17 digits, so the post time reads back
/// exactly.
const INDEX_LUA: &str = r#"
local function index_vote(index, article, posted, dir, now)
  local cutoff = now - $WEEK
  redis.call('ZREMRANGEBYSCORE', index, 0, string.format('%.17g', cutoff))
  redis.call('ZREMRANGEBYSCORE', index, string.format('%.17g', -cutoff), 0)
  if dir == 'up' then
    redis.call('ZADD', index, string.format('%.17g', posted), article)
  elseif dir == 'down' then
    redis.call('ZADD', index, string.format('%.17g', -posted), article)
  else
    redis.call('ZREM', index, article)
  end
  redis.call('EXPIRE', index, $WEEK)
end
"#;

/// The KEYS of one group named in a call, in the order the group loops of
/// the post and set-groups scripts read them ([`GROUP_KEYS`] of them):
/// `group:<g>`, `score:<g>`, `time:<g>`, then `group:<g>:top:<period>` for
/// each of [`Period::ALL`].
fn group_keys(invocation: &mut ScriptInvocation<'_>, group: &GroupName) {
    invocation
        .key(keys::group(group))
        .key(keys::group_ranking(group, Ranking::Score))
        .key(keys::group_ranking(group, Ranking::Time));
    for period in Period::ALL {
        invocation.key(keys::group_top(group, period));
    }
}

/// Members sharing the value of a feed cursor whose own member moved,
/// read to find where the page starts (ties are rare: values hold times).
const MAX_TIES: usize = 1000;
/// Members a feed page may skip as too old for its period before it
/// stops short (pruning keeps them to a second's worth of posts).
const FEED_SCAN: usize = 2000;

/// KEYS per group in [`group_keys`] (the Lua loops' stride).
const GROUP_KEYS: usize = 3 + Period::ALL.len();

/// The five `top:<period>` keys, in [`Period::ALL`]'s order.
fn top_keys(invocation: &mut ScriptInvocation<'_>) {
    for period in Period::ALL {
        invocation.key(keys::top(period));
    }
}

// --- post ---------------------------------------------------------------

/// What the post script answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PostReply {
    Limited { retry_after_secs: u64 },
    Posted { id: ArticleId, slug: String },
}

impl ScriptReply for PostReply {
    fn read(reply: &Value) -> Option<Self> {
        match status(reply)? {
            ("limited", v) => Some(Self::Limited {
                retry_after_secs: seconds(v)?,
            }),
            ("posted", [id, slug]) => match value_f64(id)? {
                id if id >= 1.0 => Some(Self::Posted {
                    id: ArticleId(id as u64),
                    slug: value_str(slug)?.to_owned(),
                }),
                _ => None,
            },
            _ => None,
        }
    }
}

const POST_LUA: &str = r#"
local rate, ids, by_score, by_time, karma, slugs, suffixes, mine_time, mine_score, my_votes =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
-- KEYS[11..15]: the net-vote rankings of the site, one per period;
-- KEYS[16..20]: those of the poster; KEYS[21]: the group directory; then
-- $GROUP_KEYS per group.
local directory = KEYS[21]
local first_group_key = 22
local poster, stem = ARGV[1], ARGV[4]
local article_prefix, voted_prefix, groups_suffix, channel = ARGV[7], ARGV[8], ARGV[9], ARGV[10]
local first_group = 11
local wait = rate_limit(rate, ARGV[5], ARGV[6])
if wait > 0 then return {'limited', wait} end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local id = redis.call('INCR', ids)
local article = article_prefix .. id
local voted = voted_prefix .. id
local groups_key = article .. groups_suffix
redis.call('SADD', voted, poster)
redis.call('EXPIRE', voted, $WEEK)
local slug = stem
if redis.call('HSETNX', slugs, slug, id) == 0 then
  local n = tonumber(redis.call('HGET', suffixes, stem)) or 1
  repeat
    n = n + 1
    slug = stem .. '-' .. n
  until redis.call('HSETNX', slugs, slug, id) == 1
  redis.call('HSET', suffixes, stem, n)
end
local ts = string.format('%.6f', now)
local score = string.format('%.6f', now + $VOTE_SCORE)
redis.call('HSET', article, 'title', ARGV[2], 'link', ARGV[3], 'poster', poster,
  'time', ts, 'votes', 1, 'downvotes', 0, 'slug', slug)
redis.call('ZADD', by_score, score, article)
redis.call('ZADD', by_time, ts, article)
redis.call('ZADD', mine_time, ts, article)
redis.call('ZADD', mine_score, score, article)
add_karma(karma, poster, 1, now)
index_vote(my_votes, article, tonumber(ts), 'up', now)
-- Net votes 1 (the own upvote of the poster), then the post time.
local top = string.format('%.0f', $TOP_STEP + math.floor(now))
for k = 11, 15 do redis.call('ZADD', KEYS[k], top, article) end
for k = 16, 20 do
  if redis.call('EXISTS', KEYS[k]) == 1 then redis.call('ZADD', KEYS[k], top, article) end
end
for i = first_group, #ARGV do
  local g, k = ARGV[i], first_group_key + $GROUP_KEYS * (i - first_group)
  if redis.call('SADD', KEYS[k], article) == 1 then redis.call('ZINCRBY', directory, -1, g) end
  redis.call('SADD', groups_key, g)
  if redis.call('EXISTS', KEYS[k + 1]) == 1 then redis.call('ZADD', KEYS[k + 1], score, article) end
  if redis.call('EXISTS', KEYS[k + 2]) == 1 then redis.call('ZADD', KEYS[k + 2], ts, article) end
  for j = k + 3, k + $GROUP_KEYS - 1 do
    if redis.call('EXISTS', KEYS[j]) == 1 then redis.call('ZADD', KEYS[j], top, article) end
  end
end
list_groups(article, groups_key)
local groups = {}
for i = first_group, #ARGV do groups[#groups + 1] = ARGV[i] end
redis.call('PUBLISH', channel, cjson.encode({ id = tostring(id), groups = groups, at = ts }))
return {'posted', id, slug}
"#;

/// Posts an article: hands out its id (`INCR article:`), a free slug and the
/// poster's own upvote (in `voted:<id>` and the poster's vote index), and
/// files it in the rankings and its groups.
///
/// The slug is the stem, or `stem-2`, `stem-3`… reserved with HSETNX on
/// `slug.to.id`, so concurrent posts never share one. The highest
/// suffix handed out per stem is kept in `slug:last-suffix`, so the
/// thousandth post of one title tries one slug, not a thousand.
static POST: LazyLock<Lua<PostReply>> = LazyLock::new(|| {
    Lua::write(
        "post",
        &[KARMA_LUA, RATE_LUA, GROUP_LIST_LUA, INDEX_LUA, POST_LUA].concat(),
    )
});

/// Runs the post script; the poster may post `limit` times per window.
pub async fn post(
    conn: &mut Conn,
    poster: &UserName,
    title: &str,
    link: &str,
    stem: &Slug,
    groups: &[GroupName],
    limit: RateLimit,
) -> AppResult<PostReply> {
    let mut invocation = POST.invocation();
    invocation
        .key(keys::user_rate(poster.as_str(), RateAction::Post))
        .key(keys::ARTICLE_IDS)
        .key(keys::SCORE)
        .key(keys::TIME)
        .key(keys::KARMA)
        .key(keys::SLUGS)
        .key(keys::SLUG_SUFFIXES)
        .key(keys::user_articles(poster.as_str(), Ranking::Time))
        .key(keys::user_articles(poster.as_str(), Ranking::Score))
        .key(keys::user_votes(poster.as_str()));
    top_keys(&mut invocation);
    for period in Period::ALL {
        invocation.key(keys::user_top(poster.as_str(), period));
    }
    invocation
        .key(keys::GROUPS_BY_SIZE)
        .arg(poster.member())
        .arg(title)
        .arg(link)
        .arg(stem.as_str())
        .arg(limit.count())
        .arg(limit.window_secs())
        .arg(keys::ARTICLE_PREFIX)
        .arg(keys::VOTED_PREFIX)
        .arg(keys::ARTICLE_GROUPS_SUFFIX)
        .arg(keys::POSTED_CHANNEL);
    for g in groups {
        group_keys(&mut invocation, g);
        invocation.arg(g.as_str());
    }
    POST.call(&invocation, conn).await
}

// --- vote ---------------------------------------------------------------

/// What the vote script answered. Every vote counts against the limit,
/// whatever its outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VoteReply {
    Limited {
        retry_after_secs: u64,
    },
    /// No such article.
    Missing,
    /// The voting window has closed.
    Closed,
    /// The voter had already voted so; nothing changed.
    Same,
    Changed,
}

impl ScriptReply for VoteReply {
    fn read(reply: &Value) -> Option<Self> {
        match status(reply)? {
            ("limited", v) => Some(Self::Limited {
                retry_after_secs: seconds(v)?,
            }),
            ("missing", _) => Some(Self::Missing),
            ("closed", _) => Some(Self::Closed),
            ("same", _) => Some(Self::Same),
            ("changed", _) => Some(Self::Changed),
            _ => None,
        }
    }
}

const VOTE_LUA: &str = r#"
local rate, article, by_time, by_score, up, down, groups_key, karma, my_votes =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local id, voter, dir = ARGV[1], ARGV[2], ARGV[3]
local user_prefix, mine_score_suffix, group_score_prefix, channel = ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local wait = rate_limit(rate, ARGV[4], ARGV[5])
if wait > 0 then return {'limited', wait} end
local week = $WEEK
local posted = redis.call('ZSCORE', by_time, article)
if not posted then
  if redis.call('EXISTS', article) == 0 then return {'missing'} end
  posted = redis.call('HGET', article, 'time')
end
posted = tonumber(posted)
if not posted then return {'missing'} end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
if now - posted >= week then return {'closed'} end

local was = 'none'
if redis.call('SISMEMBER', up, voter) == 1 then was = 'up'
elseif redis.call('SISMEMBER', down, voter) == 1 then was = 'down' end
-- The index follows the sets in every outcome, so a vote the sets hold
-- but the index does not (cast by the book's code) is indexed by the
-- voter's next vote on the article, even an unchanged one.
index_vote(my_votes, article, posted, dir, now)
if was == dir then
  return {'same', was, redis.call('ZSCORE', by_score, article)}
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
local score = redis.call('ZINCRBY', by_score, $VOTE_SCORE * (dup - ddown), article)
local poster = redis.call('HGET', article, 'poster')
if poster then
  poster = as_member(poster, user_prefix)
  add_karma(karma, poster, dup - ddown, now)
  redis.call('ZADD', poster .. mine_score_suffix, 'XX', score, article)
end
local groups = redis.call('SMEMBERS', groups_key)
for _, g in ipairs(groups) do
  redis.call('ZADD', group_score_prefix .. g, 'XX', score, article)
end
-- The net-vote rankings (KEYS[10..14] and the cached ones of the poster
-- and the groups, where they exist) move by whole votes.
local step = (dup - ddown) * $TOP_STEP
local group_prefix, group_top, user_top = ARGV[10], ARGV[11], ARGV[12]
for k = 10, 14 do redis.call('ZADD', KEYS[k], 'XX', 'INCR', step, article) end
for p = 13, #ARGV do
  if poster then redis.call('ZADD', poster .. user_top .. ARGV[p], 'XX', 'INCR', step, article) end
  for _, g in ipairs(groups) do
    redis.call('ZADD', group_prefix .. g .. group_top .. ARGV[p], 'XX', 'INCR', step, article)
  end
end
local counts = redis.call('HMGET', article, 'votes', 'downvotes')
-- cjson prints numbers with 14 digits; score and time go as exact strings.
redis.call('PUBLISH', channel, cjson.encode({
  id = id, score = score, votes = tonumber(counts[1]) or 0,
  downvotes = tonumber(counts[2]) or 0, at = string.format('%.6f', now), groups = groups }))
return {'changed', was, score}
"#;

/// Sets a voter's vote: answers `{status, previous direction, new score}`
/// (or `{'limited', seconds}`, `{'missing'}`, `{'closed'}`).
///
/// The voted sets keep the book's meaning: `voted:<id>` holds upvoters and
/// `downvoted:<id>` downvoters; a switch is one SMOVE. Both sets expire when
/// the voting window closes, as the book's `voted:<id>` does. They decide
/// the previous direction; the voter's `user:<name>:votes` index, which
/// pages read `myVote` from, is written to match them in the same step. Cached group
/// rankings that hold the article are updated in place and the change is
/// published on the score channel, all in the same step.
static VOTE: LazyLock<Lua<VoteReply>> =
    LazyLock::new(|| Lua::write("vote", &[KARMA_LUA, RATE_LUA, INDEX_LUA, VOTE_LUA].concat()));

impl VoteDirection {
    fn as_arg(self) -> &'static str {
        match self {
            VoteDirection::Up => "up",
            VoteDirection::Down => "down",
            VoteDirection::None => "none",
        }
    }
}

/// Runs the vote script; the voter may vote `limit` times per window.
pub async fn vote(
    conn: &mut Conn,
    id: ArticleId,
    voter: &UserName,
    direction: VoteDirection,
    limit: RateLimit,
) -> AppResult<VoteReply> {
    let mut invocation = VOTE.invocation();
    invocation
        .key(keys::user_rate(voter.as_str(), RateAction::Vote))
        .key(keys::article(id))
        .key(keys::TIME)
        .key(keys::SCORE)
        .key(keys::voted(id))
        .key(keys::downvoted(id))
        .key(keys::article_groups(id))
        .key(keys::KARMA)
        .key(keys::user_votes(voter.as_str()));
    top_keys(&mut invocation);
    invocation
        .arg(id.0)
        .arg(voter.member())
        .arg(direction.as_arg())
        .arg(limit.count())
        .arg(limit.window_secs())
        .arg(keys::USER_PREFIX)
        .arg(Ranking::Score.user_articles_suffix())
        .arg(Ranking::Score.group_prefix())
        .arg(keys::SCORE_CHANNEL)
        .arg(keys::GROUP_PREFIX)
        .arg(keys::GROUP_TOP_INFIX)
        .arg(keys::USER_TOP_INFIX);
    for period in Period::ALL {
        invocation.arg(period.name());
    }
    VOTE.call(&invocation, conn).await
}

// --- set groups ---------------------------------------------------------

/// What the set-groups script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetGroupsReply {
    Limited {
        retry_after_secs: u64,
    },
    Missing,
    /// The caller is not the article's poster.
    Forbidden,
    /// The article would be in more than `GroupName::MAX_PER_ARTICLE`
    /// groups; nothing was written.
    TooManyGroups,
    Done,
}

impl ScriptReply for SetGroupsReply {
    fn read(reply: &Value) -> Option<Self> {
        match status(reply)? {
            ("limited", v) => Some(Self::Limited {
                retry_after_secs: seconds(v)?,
            }),
            ("missing", _) => Some(Self::Missing),
            ("forbidden", _) => Some(Self::Forbidden),
            ("too-many-groups", _) => Some(Self::TooManyGroups),
            ("ok", _) => Some(Self::Done),
            _ => None,
        }
    }
}

const SET_GROUPS_LUA: &str = r#"
local rate, article, groups_key, by_score, by_time, top_all, directory =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local first_group_key = 8
local caller, nadd, user_prefix = ARGV[1], tonumber(ARGV[2]), ARGV[5]
local first_group = 6
local wait = rate_limit(rate, ARGV[3], ARGV[4])
if wait > 0 then return {'limited', wait} end
if redis.call('EXISTS', article) == 0 then return {'missing'} end
local poster = redis.call('HGET', article, 'poster')
if poster ~= caller and (user_prefix .. tostring(poster)) ~= caller then return {'forbidden'} end
local count = redis.call('SCARD', groups_key)
for i = first_group, #ARGV do
  local member = redis.call('SISMEMBER', groups_key, ARGV[i]) == 1
  if i < first_group + nadd and not member then count = count + 1 end
  if i >= first_group + nadd and member then count = count - 1 end
end
if count > $MAX_GROUPS then return {'too-many-groups'} end
local score = redis.call('ZSCORE', by_score, article)
local time = redis.call('ZSCORE', by_time, article)
local top = redis.call('ZSCORE', top_all, article)
for i = first_group, #ARGV do
  local g, k = ARGV[i], first_group_key + $GROUP_KEYS * (i - first_group)
  if i < first_group + nadd then
    if redis.call('SADD', KEYS[k], article) == 1 then redis.call('ZINCRBY', directory, -1, g) end
    redis.call('SADD', groups_key, g)
    if score and redis.call('EXISTS', KEYS[k + 1]) == 1 then redis.call('ZADD', KEYS[k + 1], score, article) end
    if time and redis.call('EXISTS', KEYS[k + 2]) == 1 then redis.call('ZADD', KEYS[k + 2], time, article) end
    for j = k + 3, k + $GROUP_KEYS - 1 do
      if top and redis.call('EXISTS', KEYS[j]) == 1 then redis.call('ZADD', KEYS[j], top, article) end
    end
  else
    if redis.call('SREM', KEYS[k], article) == 1 then
      if tonumber(redis.call('ZINCRBY', directory, 1, g)) >= 0 then redis.call('ZREM', directory, g) end
    end
    redis.call('SREM', groups_key, g)
    for j = k + 1, k + $GROUP_KEYS - 1 do redis.call('ZREM', KEYS[j], article) end
  end
end
list_groups(article, groups_key)
return {'ok'}
"#;

/// Adds and removes an article's groups (poster only). Cached group
/// rankings (`score:<group>`, `time:<group>`) that exist are updated in the
/// same step, so a group page shows the change at once.
static SET_GROUPS: LazyLock<Lua<SetGroupsReply>> = LazyLock::new(|| {
    Lua::write(
        "set-groups",
        &[RATE_LUA, GROUP_LIST_LUA, SET_GROUPS_LUA].concat(),
    )
});

/// Runs the set-groups script; the caller may call it `limit` times per
/// window.
pub async fn set_groups(
    conn: &mut Conn,
    id: ArticleId,
    caller: &UserName,
    add: &[GroupName],
    remove: &[GroupName],
    limit: RateLimit,
) -> AppResult<SetGroupsReply> {
    let mut invocation = SET_GROUPS.invocation();
    invocation
        .key(keys::user_rate(caller.as_str(), RateAction::SetGroups))
        .key(keys::article(id))
        .key(keys::article_groups(id))
        .key(keys::SCORE)
        .key(keys::TIME)
        .key(keys::top(Period::All))
        .key(keys::GROUPS_BY_SIZE)
        .arg(caller.member())
        .arg(add.len())
        .arg(limit.count())
        .arg(limit.window_secs())
        .arg(keys::USER_PREFIX);
    for g in add.iter().chain(remove) {
        group_keys(&mut invocation, g);
        invocation.arg(g.as_str());
    }
    SET_GROUPS.call(&invocation, conn).await
}

// --- group page ---------------------------------------------------------

/// The members of a page, best first, each with its score in the ranking
/// read (flat `member, score` pairs, as `WITHSCORES` gives them).
#[derive(Debug, Clone, PartialEq)]
pub struct ScoredMembers(pub Vec<(String, f64)>);

impl ScriptReply for ScoredMembers {
    fn read(reply: &Value) -> Option<Self> {
        let Value::Array(items) = reply else {
            return None;
        };
        if items.len() % 2 != 0 {
            return None;
        }
        items
            .chunks_exact(2)
            .map(|pair| Some((value_str(&pair[0])?.to_owned(), value_f64(&pair[1])?)))
            .collect::<Option<_>>()
            .map(Self)
    }
}

const GROUP_PAGE_LUA: &str = r#"
local group, ranking, cached = KEYS[1], KEYS[2], KEYS[3]
local start, stop, budget = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if redis.call('EXISTS', cached) == 1 then
  return redis.call('ZREVRANGE', cached, start, stop, 'WITHSCORES')
end
local size = redis.call('SCARD', group)
if size == 0 then return {} end
local total = redis.call('ZCARD', ranking)
local need = stop + 1
if need * total / size <= budget then
  local found, scores, offset, chunk = {}, {}, 0, 128
  while #found < need and offset < total and offset < 4 * budget do
    local batch = redis.call('ZREVRANGE', ranking, offset, offset + chunk - 1, 'WITHSCORES')
    if #batch == 0 then break end
    for i = 1, #batch, 2 do
      if redis.call('SISMEMBER', group, batch[i]) == 1 then
        found[#found + 1] = batch[i]
        scores[#scores + 1] = batch[i + 1]
        if #found == need then break end
      end
    end
    offset = offset + #batch / 2
    chunk = math.min(chunk * 2, 4096)
  end
  if #found == need or offset >= total then
    local page = {}
    for i = start + 1, #found do
      page[#page + 1] = found[i]
      page[#page + 1] = scores[i]
    end
    return page
  end
end
redis.call('ZINTERSTORE', cached, 2, group, ranking, 'WEIGHTS', 0, 1)
redis.call('EXPIRE', cached, $GROUP_CACHE_SECS)
return redis.call('ZREVRANGE', cached, start, stop, 'WITHSCORES')
"#;

/// One page of a group's ranking.
///
/// A cached group ranking (`score:<group>`, kept current by the write
/// scripts) answers at once. Without one, a shallow page is found by walking
/// the global ranking from the top and keeping the group's members, which
/// costs about (stop + 1) × articles / group size membership checks: a few
/// dozen for a big group's first page. Only when that would pass the budget
/// is the ranking built with the book's `ZINTERSTORE` (weighted so the
/// ranking's scores pass through, negative net-vote scores included) and
/// cached 60 s, as in the book. Either way the order is the cached one's.
///
/// Every member comes with its score in the ranking read (score or post
/// time), so a score page needs no `ZSCORE` per article afterwards.
static GROUP_PAGE: LazyLock<Lua<ScoredMembers>> =
    LazyLock::new(|| Lua::new("group-page", GROUP_PAGE_LUA));

/// Runs the group-page script for ranks `start..=stop`, spending at most
/// `budget` membership checks before building the cached ranking.
pub async fn group_page(
    conn: &mut Conn,
    group: &GroupName,
    ranking: Ranking,
    (start, stop): (isize, isize),
    budget: u32,
) -> AppResult<ScoredMembers> {
    let mut invocation = GROUP_PAGE.invocation();
    invocation
        .key(keys::group(group))
        .key(ranking.key())
        .key(keys::group_ranking(group, ranking))
        .arg(start)
        .arg(stop)
        .arg(budget);
    GROUP_PAGE.call(&invocation, conn).await
}

// --- feeds: a page after a position -------------------------------------

/// A feed page: the list's size and up to `first + 1` members after the
/// position asked for, each with its ranking value.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedReply {
    pub total: u64,
    pub members: Vec<(String, f64)>,
}

impl ScriptReply for FeedReply {
    fn read(reply: &Value) -> Option<Self> {
        let Value::Array(parts) = reply else {
            return None;
        };
        let [total, members] = parts.as_slice() else {
            return None;
        };
        Some(Self {
            total: value_f64(total)? as u64,
            members: ScoredMembers::read(members)?.0,
        })
    }
}

const FEED_LUA: &str = r#"
local key, source, members = KEYS[1], KEYS[2], KEYS[3]
local build, want, min_time = ARGV[1] == '1', tonumber(ARGV[2]) + 1, tonumber(ARGV[3])
if build and redis.call('EXISTS', key) == 0 then
  redis.call('ZINTERSTORE', key, 2, source, members, 'WEIGHTS', 1, 0)
  redis.call('EXPIRE', key, $GROUP_CACHE_SECS)
end
local rank = tonumber(ARGV[4])
if ARGV[5] then
  -- After (s, m): below s, or at s with a member before m (ties run by
  -- member, descending, as ZREVRANGE gives them).
  local s, m = ARGV[5], ARGV[6]
  local now = redis.call('ZSCORE', key, m)
  if now and tonumber(now) == tonumber(s) then
    rank = redis.call('ZREVRANK', key, m) + 1
  else
    rank = redis.call('ZCOUNT', key, '(' .. s, '+inf')
    for _, tie in ipairs(redis.call('ZRANGE', key, s, s, 'BYSCORE', 'LIMIT', 0, $MAX_TIES)) do
      if tie >= m then rank = rank + 1 end
    end
  end
end
-- Net-vote rankings hold the post time in the low bits of their scores: members
-- older than the period (not pruned yet) are skipped, within a budget.
local out, scanned = {}, 0
while #out < 2 * want and scanned < $FEED_SCAN do
  local batch = redis.call('ZRANGE', key, rank, rank + want - 1, 'REV', 'WITHSCORES')
  if #batch == 0 then break end
  for i = 1, #batch, 2 do
    local v = tonumber(batch[i + 1])
    local fresh = min_time == 0 or v - math.floor(v / $TOP_STEP) * $TOP_STEP >= min_time
    if fresh and #out < 2 * want then
      out[#out + 1] = batch[i]
      out[#out + 1] = batch[i + 1]
    end
  end
  scanned = scanned + #batch / 2
  rank = rank + #batch / 2
end
return {redis.call('ZCARD', key), out}
"#;

/// A page of a ranking (`KEYS[1]`), from a rank or right after a position
/// (a value and a member), with one more member than asked to tell whether
/// there is a next page. A cached ranking (a group's or a user's) that is
/// missing is built first from `KEYS[2]` ∩ `KEYS[3]`, as deep group pages
/// are. Reaching a position costs `O(log n)` (`ZREVRANK`, or `ZCOUNT` when
/// the member moved or left), so a deep page costs what the first does.
static FEED: LazyLock<Lua<FeedReply>> = LazyLock::new(|| Lua::new("feed", FEED_LUA));

/// Where a feed page starts.
pub enum Start<'a> {
    Rank(usize),
    /// Right after this ranking value (written exactly) and member.
    After {
        value: &'a str,
        member: &'a str,
    },
}

/// What [`feed`] reads: the ranking, and the two sets it is built from when
/// it is a cache that may be missing.
pub struct FeedSource {
    pub key: String,
    pub build: Option<(String, String)>,
    /// Skip members posted before this Unix time (net-vote rankings).
    pub min_time: u64,
}

/// Runs the feed script: `first + 1` members at most.
pub async fn feed(
    conn: &mut Conn,
    source: &FeedSource,
    start: Start<'_>,
    first: usize,
) -> AppResult<FeedReply> {
    let mut invocation = FEED.invocation();
    invocation.key(&source.key);
    match &source.build {
        Some((from, members)) => invocation.key(from).key(members).arg(1),
        None => invocation.key(&source.key).key(&source.key).arg(0),
    };
    invocation.arg(first).arg(source.min_time);
    match start {
        Start::Rank(rank) => invocation.arg(rank),
        Start::After { value, member } => invocation.arg(0).arg(value).arg(member),
    };
    FEED.call(&invocation, conn).await
}

// --- the group directory ---------------------------------------------------

const DIRECTORY_LUA: &str = r#"
local directory = KEYS[1]
local want = tonumber(ARGV[1]) + 1
local rank = 0
if ARGV[2] then
  -- After (s, name): above s in the set (a smaller group), or at s with a
  -- name after it (ties run by name, ascending).
  local s, name = ARGV[2], ARGV[3]
  local now = redis.call('ZSCORE', directory, name)
  if now and tonumber(now) == tonumber(s) then
    rank = redis.call('ZRANK', directory, name) + 1
  else
    rank = redis.call('ZCOUNT', directory, '-inf', '(' .. s)
    for _, tie in ipairs(redis.call('ZRANGE', directory, s, s, 'BYSCORE', 'LIMIT', 0, $MAX_TIES)) do
      if tie <= name then rank = rank + 1 end
    end
  end
end
return {redis.call('ZCARD', directory), redis.call('ZRANGE', directory, rank, rank + want - 1, 'WITHSCORES')}
"#;

/// A page of the group directory after a position (minus the size, and
/// the name), as [`FEED`] does for articles.
static DIRECTORY: LazyLock<Lua<FeedReply>> = LazyLock::new(|| Lua::new("directory", DIRECTORY_LUA));

/// Runs the directory script: `first + 1` groups at most.
pub async fn directory(
    conn: &mut Conn,
    after: Option<(&str, &str)>,
    first: usize,
) -> AppResult<FeedReply> {
    let mut invocation = DIRECTORY.invocation();
    invocation.key(keys::GROUPS_BY_SIZE).arg(first);
    if let Some((value, name)) = after {
        invocation.arg(value).arg(name);
    }
    DIRECTORY.call(&invocation, conn).await
}

const RECOUNT_GROUPS_LUA: &str = r#"
local directory = KEYS[1]
local start, batch, prefix = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local names = redis.call('ZRANGE', directory, start, start + batch - 1)
for _, g in ipairs(names) do
  local n = redis.call('SCARD', prefix .. g)
  if n == 0 then redis.call('ZREM', directory, g) else redis.call('ZADD', directory, -n, g) end
end
return {'built', #names}
"#;

/// Sets the directory's counts of `batch` groups from rank `start` on to
/// their `group:<name>` sets' sizes (dropping empty ones); answers how many
/// it looked at. With [`index_groups`], how the book's group changes are
/// counted.
static RECOUNT_GROUPS: LazyLock<Lua<Counted>> =
    LazyLock::new(|| Lua::new("recount-groups", RECOUNT_GROUPS_LUA));

pub async fn recount_groups(conn: &mut Conn, start: usize, batch: usize) -> AppResult<u64> {
    let mut invocation = RECOUNT_GROUPS.invocation();
    invocation
        .key(keys::GROUPS_BY_SIZE)
        .arg(start)
        .arg(batch)
        .arg(keys::GROUP_PREFIX);
    Ok(RECOUNT_GROUPS.call(&invocation, conn).await?.0)
}

// --- net-vote rankings: pruning and building ------------------------------

const PRUNE_TOP_LUA: &str = r#"
local top, by_time, marks = KEYS[1], KEYS[2], KEYS[3]
local cutoff, batch, period = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local from = redis.call('HGET', marks, period)
local min = '-inf'
if from then min = '(' .. from end
local old = redis.call('ZRANGEBYSCORE', by_time, min, cutoff, 'WITHSCORES', 'LIMIT', 0, batch)
local n = #old / 2
for i = 1, #old, 2 do redis.call('ZREM', top, old[i]) end
if n == batch then redis.call('HSET', marks, period, old[#old]) else redis.call('HSET', marks, period, cutoff) end
return {'pruned', n}
"#;

/// Removes from `top:<period>` up to `batch` articles posted at or before
/// `cutoff`, resuming where the last call stopped (`index:top:pruned`).
static PRUNE_TOP: LazyLock<Lua<Counted>> = LazyLock::new(|| Lua::new("prune-top", PRUNE_TOP_LUA));

/// A script's `{status, n}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counted(pub u64);

impl ScriptReply for Counted {
    fn read(reply: &Value) -> Option<Self> {
        match status(reply)? {
            ("pruned" | "built" | "indexed", [n]) => Some(Self(value_f64(n)? as u64)),
            _ => None,
        }
    }
}

/// Runs the pruning of one period; answers how many articles left it.
pub async fn prune_top(
    conn: &mut Conn,
    period: Period,
    cutoff: u64,
    batch: usize,
) -> AppResult<u64> {
    let mut invocation = PRUNE_TOP.invocation();
    invocation
        .key(keys::top(period))
        .key(keys::TIME)
        .key(keys::TOP_PRUNED)
        .arg(cutoff)
        .arg(batch)
        .arg(period.name());
    Ok(PRUNE_TOP.call(&invocation, conn).await?.0)
}

const BUILD_TOP_LUA: &str = r#"
local by_time, by_score = KEYS[1], KEYS[2]
local from, batch, now, skip = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[8])
local items = redis.call('ZRANGEBYSCORE', by_time, from, '+inf', 'WITHSCORES', 'LIMIT', skip, batch)
for i = 1, #items, 2 do
  local m, t = items[i], tonumber(items[i + 1])
  local s = tonumber(redis.call('ZSCORE', by_score, m))
  local v = s and math.floor((s - t) / $VOTE_SCORE + 0.5) * $TOP_STEP + math.floor(t)
  -- An article whose value is already right (the common case of a sweep)
  -- costs two reads and no write.
  if v and tonumber(redis.call('ZSCORE', KEYS[7], m)) ~= v then
    for j = 1, 4 do
      if now - t < tonumber(ARGV[3 + j]) then
        redis.call('ZADD', KEYS[2 + j], v, m)
      else
        redis.call('ZREM', KEYS[2 + j], m)
      end
    end
    redis.call('ZADD', KEYS[7], v, m)
  end
end
if #items / 2 < batch then return {'built', #items / 2} end
-- The next batch starts at the last post time, past the articles of this
-- one posted at that instant (a run of them may span batches).
local last, same = items[#items], 0
for i = #items, 2, -2 do
  if items[i] ~= last then break end
  same = same + 1
end
if tonumber(last) == tonumber(from) then same = same + skip end
return {'more', #items / 2, last, same}
"#;

/// Writes the net-vote scores of up to `batch` articles of `time:`, from
/// post time `from` on, derived from the book's keys: net votes =
/// (`score:` − `time:`) / 432. Answers the articles written and where the
/// next batch starts (None at the end).
static BUILD_TOP: LazyLock<Lua<BuildTopReply>> =
    LazyLock::new(|| Lua::new("build-top", BUILD_TOP_LUA));

#[derive(Debug, Clone, PartialEq)]
pub struct BuildTopReply {
    pub articles: u64,
    /// Where the next batch starts, or None when this was the last batch.
    pub next: Option<TopCursor>,
}

/// A place in `time:`: from this post time (a `ZRANGEBYSCORE` bound),
/// past the first `skip` articles posted at it.
#[derive(Debug, Clone, PartialEq)]
pub struct TopCursor {
    pub from: String,
    pub skip: u64,
}

impl ScriptReply for BuildTopReply {
    fn read(reply: &Value) -> Option<Self> {
        match status(reply)? {
            ("built", [n]) => Some(Self {
                articles: value_f64(n)? as u64,
                next: None,
            }),
            ("more", [n, last, same]) => Some(Self {
                articles: value_f64(n)? as u64,
                next: Some(TopCursor {
                    from: value_str(last)?.to_owned(),
                    skip: value_f64(same)? as u64,
                }),
            }),
            _ => None,
        }
    }
}

/// Runs one batch of the net-vote build from `at`.
pub async fn build_top(
    conn: &mut Conn,
    at: &TopCursor,
    batch: usize,
    now: u64,
) -> AppResult<BuildTopReply> {
    let mut invocation = BUILD_TOP.invocation();
    invocation.key(keys::TIME).key(keys::SCORE);
    top_keys(&mut invocation);
    invocation.arg(&at.from).arg(batch).arg(now);
    for period in &Period::ALL[..4] {
        invocation.arg(period.secs().unwrap_or(u64::MAX));
    }
    invocation.arg(at.skip);
    BUILD_TOP.call(&invocation, conn).await
}

// --- sign up ------------------------------------------------------------

/// What the sign-up script answered; a taken name counts against the limit
/// too, which slows down probing for names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignUpReply {
    Limited {
        retry_after_secs: u64,
    },
    Taken,
    Created,
    /// The folded-name index is not built yet (the first start).
    Indexing,
}

impl ScriptReply for SignUpReply {
    fn read(reply: &Value) -> Option<Self> {
        match status(reply)? {
            ("limited", v) => Some(Self::Limited {
                retry_after_secs: seconds(v)?,
            }),
            ("taken", _) => Some(Self::Taken),
            ("created", _) => Some(Self::Created),
            ("indexing", _) => Some(Self::Indexing),
            _ => None,
        }
    }
}

/// A name is taken when its account exists or when another name folds
/// to the same (a case twin); the new name is indexed by its folded form.
const SIGN_UP_LUA: &str = r#"
local user, session, rate, by_folded, indexed = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
if redis.call('EXISTS', indexed) == 0 then return {'indexing'} end
local wait = rate_limit(rate, ARGV[5], ARGV[6])
if wait > 0 then return {'limited', wait} end
if redis.call('EXISTS', user) == 1 then return {'taken'} end
if redis.call('HEXISTS', by_folded, ARGV[7]) == 1 then return {'taken'} end
redis.call('HSET', user, 'name', ARGV[1], 'password', ARGV[2], 'created', ARGV[3])
redis.call('HSET', by_folded, ARGV[7], ARGV[1])
redis.call('SET', session, ARGV[1], 'EX', ARGV[4])
return {'created'}
"#;

/// Creates an account and its first session together.
static SIGN_UP: LazyLock<Lua<SignUpReply>> =
    LazyLock::new(|| Lua::write("sign-up", &[RATE_LUA, SIGN_UP_LUA].concat()));

/// Runs the sign-up script, counting against the client address' `limit`.
pub async fn sign_up(
    conn: &mut Conn,
    name: &UserName,
    password_hash: &str,
    created: i64,
    token_hash: &str,
    rate_key: String,
    limit: RateLimit,
) -> AppResult<SignUpReply> {
    let mut invocation = SIGN_UP.invocation();
    invocation
        .key(keys::user(name.as_str()))
        .key(keys::session(token_hash))
        .key(rate_key)
        .key(keys::USERS_BY_FOLDED_NAME)
        .key(keys::NAMES_INDEX_BUILT)
        .arg(name.as_str())
        .arg(password_hash)
        .arg(created)
        .arg(keys::SESSION_TTL_SECS)
        .arg(limit.count())
        .arg(limit.window_secs())
        .arg(name.folded().as_str());
    SIGN_UP.call(&invocation, conn).await
}

/// KEYS `users:by-folded-name`; ARGV the accounts' key prefix (`user:`),
/// then pairs of (name, folded name) of existing accounts. Each folded
/// name goes to its oldest account (by `created`, then by name), so that
/// of two case twins made before names were folded, the first keeps the
/// name in other cases.
const INDEX_NAMES_LUA: &str = r#"
local by_folded, prefix = KEYS[1], ARGV[1]
local indexed = 0
local function created(name)
  return tonumber(redis.call('HGET', prefix .. name, 'created') or '0') or 0
end
for i = 2, #ARGV, 2 do
  local name, folded = ARGV[i], ARGV[i + 1]
  local current = redis.call('HGET', by_folded, folded)
  local older = not current
  if current and current ~= name then
    local a, b = created(name), created(current)
    older = a < b or (a == b and name < current)
  end
  if older then
    redis.call('HSET', by_folded, folded, name)
    indexed = indexed + 1
  end
end
return {'indexed', indexed}
"#;

static INDEX_NAMES: LazyLock<Lua<Counted>> =
    LazyLock::new(|| Lua::new("index-names", INDEX_NAMES_LUA));

/// Indexes `names` (existing accounts) by their folded form.
pub async fn index_names(conn: &mut Conn, names: &[UserName]) -> AppResult<u64> {
    let mut invocation = INDEX_NAMES.invocation();
    invocation
        .key(keys::USERS_BY_FOLDED_NAME)
        .arg(keys::USER_PREFIX);
    for name in names {
        invocation.arg(name.as_str()).arg(name.folded().as_str());
    }
    Ok(INDEX_NAMES.call(&invocation, conn).await?.0)
}

// --- login attempt ------------------------------------------------------

/// What the login-attempt script answered: the attempt may go ahead, or
/// which limit refused it and the seconds until its window ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginAttemptReply {
    Allowed,
    AddressLimited { retry_after_secs: u64 },
    NameLimited { retry_after_secs: u64 },
}

impl ScriptReply for LoginAttemptReply {
    fn read(reply: &Value) -> Option<Self> {
        match status(reply)? {
            ("ok", _) => Some(Self::Allowed),
            ("address", v) => Some(Self::AddressLimited {
                retry_after_secs: seconds(v)?,
            }),
            ("name", v) => Some(Self::NameLimited {
                retry_after_secs: seconds(v)?,
            }),
            _ => None,
        }
    }
}

const LOGIN_ATTEMPT_LUA: &str = r#"
local by_name, by_address = KEYS[1], KEYS[2]
local wait = rate_limit(by_address, ARGV[3], ARGV[4])
if wait > 0 then return {'address', wait} end
wait = rate_limit(by_name, ARGV[1], ARGV[2])
if wait > 0 then return {'name', wait} end
return {'ok'}
"#;

/// Counts one logIn attempt before its password is checked, so concurrent
/// guesses cannot slip past the limits while the hash is verified. An
/// attempt refused by its address is not counted against the name: it
/// never reached a password check.
static LOGIN_ATTEMPT: LazyLock<Lua<LoginAttemptReply>> =
    LazyLock::new(|| Lua::new("login-attempt", &[RATE_LUA, LOGIN_ATTEMPT_LUA].concat()));

/// Runs the login-attempt script with the name's counter and limit and the
/// address' counter and limit.
pub async fn login_attempt(
    conn: &mut Conn,
    name: &UserName,
    (name_attempts, name_window_secs): (u32, u64),
    address_key: String,
    address_limit: RateLimit,
) -> AppResult<LoginAttemptReply> {
    let mut invocation = LOGIN_ATTEMPT.invocation();
    invocation
        .key(keys::login_attempts(name.folded().as_str()))
        .key(address_key)
        .arg(name_attempts)
        .arg(name_window_secs)
        .arg(address_limit.count())
        .arg(address_limit.window_secs());
    LOGIN_ATTEMPT.call(&invocation, conn).await
}

// --- rename slug --------------------------------------------------------

/// What the rename-slug script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenameSlugReply {
    Limited {
        retry_after_secs: u64,
    },
    Missing,
    Forbidden,
    /// Another article has the slug.
    Taken,
    Renamed,
}

impl ScriptReply for RenameSlugReply {
    fn read(reply: &Value) -> Option<Self> {
        match status(reply)? {
            ("limited", v) => Some(Self::Limited {
                retry_after_secs: seconds(v)?,
            }),
            ("missing", _) => Some(Self::Missing),
            ("forbidden", _) => Some(Self::Forbidden),
            ("taken", _) => Some(Self::Taken),
            ("ok", _) => Some(Self::Renamed),
            _ => None,
        }
    }
}

const RENAME_SLUG_LUA: &str = r#"
local rate, article, slugs = KEYS[1], KEYS[2], KEYS[3]
local id, caller, new, user_prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[6]
local wait = rate_limit(rate, ARGV[4], ARGV[5])
if wait > 0 then return {'limited', wait} end
if redis.call('EXISTS', article) == 0 then return {'missing'} end
local poster = redis.call('HGET', article, 'poster')
if poster ~= caller and (user_prefix .. tostring(poster)) ~= caller then return {'forbidden'} end
local old = redis.call('HGET', article, 'slug')
if old == new then return {'ok'} end
local owner = redis.call('HGET', slugs, new)
if owner and owner ~= id then return {'taken'} end
redis.call('HSET', slugs, new, id)
redis.call('HSET', article, 'slug', new)
if old then redis.call('HDEL', slugs, old) end
return {'ok'}
"#;

/// Gives an article a new slug (poster only), freeing the old one in the
/// same step.
static RENAME_SLUG: LazyLock<Lua<RenameSlugReply>> =
    LazyLock::new(|| Lua::write("rename-slug", &[RATE_LUA, RENAME_SLUG_LUA].concat()));

/// Runs the rename-slug script; the caller may rename `limit` times per
/// window.
pub async fn rename_slug(
    conn: &mut Conn,
    id: ArticleId,
    caller: &UserName,
    slug: &Slug,
    limit: RateLimit,
) -> AppResult<RenameSlugReply> {
    let mut invocation = RENAME_SLUG.invocation();
    invocation
        .key(keys::user_rate(caller.as_str(), RateAction::RenameSlug))
        .key(keys::article(id))
        .key(keys::SLUGS)
        .arg(id.0)
        .arg(caller.member())
        .arg(slug.as_str())
        .arg(limit.count())
        .arg(limit.window_secs())
        .arg(keys::USER_PREFIX);
    RENAME_SLUG.call(&invocation, conn).await
}

// --- view ---------------------------------------------------------------

/// What the view script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewReply {
    Limited {
        retry_after_secs: u64,
    },
    Missing,
    /// The viewer was already counted in this view window.
    Repeated,
    Counted,
}

impl ScriptReply for ViewReply {
    fn read(reply: &Value) -> Option<Self> {
        match status(reply)? {
            ("limited", v) => Some(Self::Limited {
                retry_after_secs: seconds(v)?,
            }),
            ("missing", _) => Some(Self::Missing),
            ("repeat", _) => Some(Self::Repeated),
            ("counted", _) => Some(Self::Counted),
            _ => None,
        }
    }
}

const VIEW_LUA: &str = r#"
local rate, viewers, article = KEYS[1], KEYS[2], KEYS[3]
local viewer = ARGV[1]
if redis.call('EXISTS', article) == 0 then return {'missing'} end
if redis.call('SISMEMBER', viewers, viewer) == 1 then return {'repeat'} end
local wait = rate_limit(rate, ARGV[2], ARGV[3])
if wait > 0 then return {'limited', wait} end
redis.call('SADD', viewers, viewer)
if redis.call('TTL', viewers) < 0 then redis.call('EXPIRE', viewers, ARGV[4]) end
redis.call('HINCRBY', article, 'views', 1)
return {'counted'}
"#;

/// Counts a view (HINCRBY on the article's `views` field) once per viewer
/// per view window: the viewer set remembers who was counted and expires
/// with the window, which the first counted view after it starts.
///
/// Only a view that would be counted uses the rate limit: a repeat writes
/// nothing (reading an article is not limited either), and checking the
/// set first means a reader who reopens the same article is never refused.
static VIEW: LazyLock<Lua<ViewReply>> =
    LazyLock::new(|| Lua::write("view", &[RATE_LUA, VIEW_LUA].concat()));

/// Runs the view script for `viewer` (`user:<name>` or `client:<ip>`),
/// counted against `rate_key`'s `limit`.
pub async fn view(
    conn: &mut Conn,
    id: ArticleId,
    viewer: String,
    rate_key: String,
    limit: RateLimit,
    view_window_secs: u64,
) -> AppResult<ViewReply> {
    let mut invocation = VIEW.invocation();
    invocation
        .key(rate_key)
        .key(keys::article_viewers(id))
        .key(keys::article(id))
        .arg(viewer)
        .arg(limit.count())
        .arg(limit.window_secs())
        .arg(view_window_secs);
    VIEW.call(&invocation, conn).await
}

// --- persisted query registration ---------------------------------------

/// What the registration script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegisterReply {
    /// Kept (a known document: its TTL and place refreshed).
    Registered,
    /// Redis is near its `maxmemory`: nothing was written.
    MemoryNearlyFull,
    AddressLimited {
        retry_after_secs: u64,
    },
    SiteLimited {
        retry_after_secs: u64,
    },
}

impl ScriptReply for RegisterReply {
    fn read(reply: &Value) -> Option<Self> {
        match status(reply)? {
            ("ok", _) => Some(Self::Registered),
            ("memory", _) => Some(Self::MemoryNearlyFull),
            ("address", v) => Some(Self::AddressLimited {
                retry_after_secs: seconds(v)?,
            }),
            ("site", v) => Some(Self::SiteLimited {
                retry_after_secs: seconds(v)?,
            }),
            _ => None,
        }
    }
}

/// KEYS `document:<sha256>`, `document:registered`, the address' and the
/// site's registration counters; ARGV the text, the TTL in seconds, the
/// most documents kept, the address' limit and window, the site's limit
/// and window, and the share of `maxmemory` (percent) past which new
/// documents are refused.
///
/// Registrations older than the TTL have expired with their key and are
/// pruned from the index first. A known document is refreshed (TTL and
/// place) without being counted: it takes no new memory. A new one is
/// refused, writing nothing, when Redis' `used_memory` has reached the
/// share of `maxmemory` (the room left is for users' writes), then counted
/// against the address and the site. A new document past the cap pushes
/// the oldest ones out (their keys are deleted), so the documents held
/// never exceed the cap. Times are Redis' clock in microseconds, made
/// strictly increasing, so "oldest" is registration order even within one
/// second.
const REGISTER_LUA: &str = r#"
local document, index, by_address, by_site = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local ttl, max = tonumber(ARGV[2]), tonumber(ARGV[3])
local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', index, '-inf', now - ttl)
if not redis.call('ZSCORE', index, document) then
  local info = redis.call('INFO', 'memory')
  local used = tonumber(string.match(info, 'used_memory:(%d+)'))
  local limit = tonumber(string.match(info, 'maxmemory:(%d+)'))
  if used and limit and limit > 0 and used * 100 >= limit * tonumber(ARGV[8]) then
    return {'memory'}
  end
  local wait = rate_limit(by_address, ARGV[4], ARGV[5])
  if wait > 0 then return {'address', wait} end
  wait = rate_limit(by_site, ARGV[6], ARGV[7])
  if wait > 0 then return {'site', wait} end
  local over = redis.call('ZCARD', index) - max + 1
  if over > 0 then
    local oldest = redis.call('ZPOPMIN', index, over)
    for i = 1, #oldest, 2 do redis.call('DEL', oldest[i]) end
  end
end
local last = redis.call('ZRANGE', index, -1, -1, 'WITHSCORES')
if last[2] and tonumber(last[2]) >= now then now = tonumber(last[2]) + 0.000001 end
redis.call('SET', document, ARGV[1], 'EX', ttl)
redis.call('ZADD', index, now, document)
return {'ok'}
"#;

static REGISTER: LazyLock<Lua<RegisterReply>> =
    LazyLock::new(|| Lua::new("register-document", &[RATE_LUA, REGISTER_LUA].concat()));

/// How a registration is bounded (see [`REGISTER_LUA`]).
#[derive(Debug, Clone, Copy)]
pub struct RegisterLimits {
    pub ttl_secs: u64,
    pub max_documents: u64,
    pub per_address: RateLimit,
    pub per_site: RateLimit,
    pub max_memory_percent: u8,
}

/// Runs the registration script for `text` under `sha256_hex`, counted
/// against `address_key`.
pub async fn register_document(
    conn: &mut Conn,
    sha256_hex: &str,
    text: &str,
    address_key: String,
    limits: RegisterLimits,
) -> AppResult<RegisterReply> {
    let mut invocation = REGISTER.invocation();
    invocation
        .key(keys::document(sha256_hex))
        .key(keys::DOCUMENTS)
        .key(address_key)
        .key(keys::site_rate(RateAction::RegisterQuery))
        .arg(text)
        .arg(limits.ttl_secs.max(1))
        .arg(limits.max_documents.max(1))
        .arg(limits.per_address.count())
        .arg(limits.per_address.window_secs())
        .arg(limits.per_site.count())
        .arg(limits.per_site.window_secs())
        .arg(limits.max_memory_percent);
    REGISTER.call(&invocation, conn).await
}

// --- vote index backfill ------------------------------------------------

/// Where a backfill pass goes on: the `time:` score to start from (the last
/// one read, inclusive) and how many articles with exactly that score were
/// done already.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub from: String,
    pub skip: u64,
}

/// What one backfill batch did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackfillBatch {
    /// Articles whose voters were indexed.
    pub articles: u64,
    /// Index entries written.
    pub entries: u64,
    /// None when the pass has reached the newest article.
    pub next: Option<Cursor>,
}

impl ScriptReply for BackfillBatch {
    fn read(reply: &Value) -> Option<Self> {
        let ("batch", [articles, entries, from, skip]) = status(reply)? else {
            return None;
        };
        let count = |v: &Value| match v {
            Value::Int(n) if *n >= 0 => Some(*n as u64),
            _ => None,
        };
        let from = value_str(from)?;
        Some(Self {
            articles: count(articles)?,
            entries: count(entries)?,
            next: (!from.is_empty()).then(|| Cursor {
                from: from.to_owned(),
                skip: count(skip).unwrap_or(0),
            }),
        })
    }
}

const BACKFILL_LUA: &str = r#"
local by_time = KEYS[1]
local from, skip, size, budget = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local article_prefix, voted_prefix, downvoted_prefix, user_prefix, votes_suffix =
  ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local week = $WEEK
if from == '' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
  from = '(' .. string.format('%.17g', now - week)
end
local page = redis.call('ZRANGEBYSCORE', by_time, from, '+inf', 'WITHSCORES', 'LIMIT', skip, size)
local articles, entries, spent = 0, 0, 0
local last, same = nil, 0
for i = 1, #page, 2 do
  local article, posted = page[i], page[i + 1]
  if string.sub(article, 1, #article_prefix) == article_prefix then
    local id = string.sub(article, #article_prefix + 1)
    -- Downvoters first: a voter in both sets ends as an upvoter, as the
    -- vote script reads them.
    for _, set in ipairs({{downvoted_prefix, '-'}, {voted_prefix, ''}}) do
      local voters = redis.call('SMEMBERS', set[1] .. id)
      spent = spent + #voters
      for _, voter in ipairs(voters) do
        if string.sub(voter, 1, #user_prefix) == user_prefix then
          local index = voter .. votes_suffix
          redis.call('ZADD', index, set[2] .. posted, article)
          redis.call('EXPIRE', index, week)
          entries = entries + 1
        end
      end
    end
  end
  articles = articles + 1
  if posted == last then same = same + 1 else last, same = posted, 1 end
  if spent >= budget then break end
end
if last == nil or (articles * 2 == #page and #page < 2 * size) then
  return {'batch', articles, entries, '', 0}
end
if last == from then same = same + skip end
return {'batch', articles, entries, last, same}
"#;

/// Copies the voters of up to `size` articles of the voting window from the
/// voted sets into their `user:<name>:votes` indexes, oldest article first,
/// starting at a [`Cursor`] (none: at the window's start). It stops early
/// once it has read `budget` voters, after a whole article, so one call is
/// bounded in work and never a huge command; the pass is a series of them.
///
/// Reading the sets and writing the index happen in one script, so a vote
/// cast meanwhile is either already in the sets (and copied) or comes after
/// (and writes the index itself): the copy never overwrites a newer vote.
/// Only members with the `user:` prefix are indexed, the ones `myVote` has
/// always matched. Each written index expires a week after this write.
static BACKFILL: LazyLock<Lua<BackfillBatch>> =
    LazyLock::new(|| Lua::new("vote-index-backfill", BACKFILL_LUA));

/// Runs one backfill batch.
pub async fn backfill_votes(
    conn: &mut Conn,
    cursor: Option<&Cursor>,
    size: u32,
    budget: u32,
) -> AppResult<BackfillBatch> {
    let mut invocation = BACKFILL.invocation();
    invocation
        .key(keys::TIME)
        .arg(cursor.map_or("", |c| c.from.as_str()))
        .arg(cursor.map_or(0, |c| c.skip))
        .arg(size)
        .arg(budget)
        .arg(keys::ARTICLE_PREFIX)
        .arg(keys::VOTED_PREFIX)
        .arg(keys::DOWNVOTED_PREFIX)
        .arg(keys::USER_PREFIX)
        .arg(keys::USER_VOTES_SUFFIX);
    BACKFILL.call(&invocation, conn).await
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::*;

    fn reply(items: &[&str]) -> Value {
        Value::Array(
            items
                .iter()
                .map(|s| Value::BulkString(s.as_bytes().to_vec()))
                .collect(),
        )
    }

    #[test]
    fn replies_are_read_into_their_types() {
        assert_eq!(
            VoteReply::read(&reply(&["changed", "up", "1700000432.5"])),
            Some(VoteReply::Changed)
        );
        assert_eq!(
            VoteReply::read(&Value::Array(vec![
                Value::BulkString(b"limited".to_vec()),
                Value::Int(12)
            ])),
            Some(VoteReply::Limited {
                retry_after_secs: 12
            })
        );
        assert_eq!(
            PostReply::read(&Value::Array(vec![
                Value::BulkString(b"posted".to_vec()),
                Value::Int(7),
                Value::BulkString(b"hello-world".to_vec()),
            ])),
            Some(PostReply::Posted {
                id: ArticleId(7),
                slug: "hello-world".to_owned()
            })
        );
        assert_eq!(
            LoginAttemptReply::read(&Value::Array(vec![
                Value::BulkString(b"name".to_vec()),
                Value::Int(30)
            ])),
            Some(LoginAttemptReply::NameLimited {
                retry_after_secs: 30
            })
        );
        assert_eq!(
            SetGroupsReply::read(&reply(&["too-many-groups"])),
            Some(SetGroupsReply::TooManyGroups)
        );
        assert_eq!(
            ScoredMembers::read(&reply(&["article:1", "12.5", "article:2", "7"])),
            Some(ScoredMembers(vec![
                ("article:1".into(), 12.5),
                ("article:2".into(), 7.0)
            ]))
        );
        assert_eq!(
            ScoredMembers::read(&reply(&["article:1", "12.5", "article:2"])),
            None
        );
    }

    /// A reply no type knows (a status of another script, a refusal
    /// without its seconds, not a list) is not guessed at.
    #[test]
    fn unknown_replies_are_refused() {
        assert_eq!(VoteReply::read(&reply(&["posted"])), None);
        assert_eq!(VoteReply::read(&reply(&["limited"])), None);
        assert_eq!(VoteReply::read(&reply(&[])), None);
        assert_eq!(VoteReply::read(&Value::Okay), None);
        assert_eq!(PostReply::read(&reply(&["posted", "0", "x"])), None);
        assert_eq!(PostReply::read(&reply(&["posted"])), None);
        assert_eq!(SignUpReply::read(&reply(&["ok"])), None);
        assert_eq!(ViewReply::read(&reply(&["changed"])), None);
        assert_eq!(RenameSlugReply::read(&reply(&["counted"])), None);
        assert_eq!(
            LoginAttemptReply::read(&Value::Array(vec![
                Value::BulkString(b"address".to_vec()),
                Value::Int(0)
            ])),
            None
        );
    }

    /// Every Lua body this module loads.
    const BODIES: [&str; 18] = [
        KARMA_LUA,
        RATE_LUA,
        GROUP_LIST_LUA,
        POST_LUA,
        VOTE_LUA,
        SET_GROUPS_LUA,
        GROUP_PAGE_LUA,
        SIGN_UP_LUA,
        LOGIN_ATTEMPT_LUA,
        RENAME_SLUG_LUA,
        VIEW_LUA,
        INDEX_LUA,
        BACKFILL_LUA,
        FEED_LUA,
        PRUNE_TOP_LUA,
        BUILD_TOP_LUA,
        DIRECTORY_LUA,
        RECOUNT_GROUPS_LUA,
    ];

    /// The string literals of a Lua body ('…' and "…").
    fn literals(body: &str) -> Vec<&str> {
        let mut out = Vec::new();
        let mut rest = body;
        while let Some(start) = rest.find(['\'', '"']) {
            let quote = &rest[start..start + 1];
            let after = &rest[start + 1..];
            let Some(end) = after.find(quote) else { break };
            out.push(&after[..end]);
            rest = &after[end + 1..];
        }
        out
    }

    /// Keys reach the scripts in KEYS, or as prefixes in ARGV: no body
    /// spells one. Redis keys are recognised by a `:` or a `.` (every key
    /// of the keyspace has one, `slug.to.id` a dot; no hash field or
    /// command name does; format strings such as `%.6f` are skipped).
    #[test]
    fn no_script_spells_a_key() {
        for body in BODIES {
            let literals = literals(body);
            assert!(!literals.is_empty());
            for literal in literals {
                assert!(
                    !literal.contains(':') && (literal.starts_with('%') || !literal.contains('.')),
                    "a script spells {literal:?}"
                );
            }
        }
        // The check itself sees a key when there is one.
        assert_eq!(
            literals("redis.call('ZADD', 'score:', 1, x)"),
            ["ZADD", "score:"]
        );
    }

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
