//! The scripts' tests: how replies are read, what the `.lua` files may
//! hold, and every script's edge cases run against a real `redis-server`
//! (one per test, on a unix socket in a temporary directory, stopped when
//! the test ends), through the call functions, so the KEYS and ARGV each
//! lays out and the typed reply it reads are tested with the Lua.

mod accounts;
mod derive;
mod directory;
mod documents;
mod feeds;
mod groups;
mod moderation;
mod outbox;
mod post;
mod rate_limit;
mod slugs;
mod top;
mod views;
mod vote;

use std::path::{Path, PathBuf};
use std::time::Duration;

use redis::{FromRedisValue, Value};

use super::*;
use crate::domain::{ArticleId, GroupName, Slug, UserName};
use crate::rate::RateLimit;
use crate::redis_server::RedisServer;
use crate::store::keys::{self, At};
use crate::store::{Conn, Locator, Store};

// --- a real Redis -------------------------------------------------------

/// A `redis-server` of one test: no persistence, a unix socket only.
pub(super) struct TestRedis {
    server: RedisServer,
    _dir: tempfile::TempDir,
}

impl TestRedis {
    pub(super) async fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("vg-lua")
            .tempdir()
            .expect("temp dir");
        let server = RedisServer::builder(dir.path()).start().await.expect(
            "redis-server must be installed to run the tests (apt-get install redis-server)",
        );
        Self { server, _dir: dir }
    }

    fn url(&self) -> String {
        self.server.url().to_owned()
    }

    /// A connection as the store hands them out.
    pub(super) async fn conn(&self) -> Conn {
        self.conn_waiting(None).await
    }

    /// A connection of a store run with `--wait-replicas`.
    pub(super) async fn conn_waiting(&self, wait: Option<(u32, Duration)>) -> Conn {
        let store = self.store(wait);
        store.conn().await.expect("a connection to the test redis")
    }

    pub(super) fn store(&self, wait: Option<(u32, Duration)>) -> Store {
        let timeout = Duration::from_secs(5);
        let locator = Locator::url(&self.url()).expect("a redis URL");
        Store::new(locator, 1, timeout, timeout, wait).expect("a store")
    }
}

// --- shorthands for the tests -------------------------------------------

/// Runs a script's call alone (its script loaded first) and reads its reply.
pub(super) async fn run<R: ScriptReply>(conn: &mut Conn, call: Call) -> R {
    call.script
        .load_async(conn)
        .await
        .expect("the script loads");
    let reply: Value = call.cmd.query_async(conn).await.expect("the script runs");
    R::read(&reply).unwrap_or_else(|| panic!("an unknown reply: {reply:?}"))
}

/// Runs a plain command, to arrange or inspect data.
pub(super) async fn q<T: FromRedisValue>(conn: &mut Conn, cmd: &redis::Cmd) -> T {
    cmd.query_async(conn).await.expect("a redis command")
}

pub(super) fn cmd(name: &str) -> redis::Cmd {
    redis::cmd(name)
}

pub(super) async fn zscore(conn: &mut Conn, key: &str, member: &str) -> Option<f64> {
    q(conn, cmd("ZSCORE").arg(key).arg(member)).await
}

pub(super) async fn exists(conn: &mut Conn, key: &str) -> bool {
    q(conn, cmd("EXISTS").arg(key)).await
}

/// Sets `fields` of the hash `key`, as another writer would.
pub(super) async fn hset(conn: &mut Conn, key: &str, fields: &[(&str, &str)]) {
    let () = q(conn, cmd("HSET").arg(key).arg(fields)).await;
}

pub(super) fn user(name: &str) -> UserName {
    UserName::parse(name).expect("a user name")
}

pub(super) fn group(name: &str) -> GroupName {
    GroupName::parse(name).expect("a group name")
}

pub(super) fn groups(names: &[&str]) -> Vec<GroupName> {
    names.iter().map(|n| group(n)).collect()
}

pub(super) fn slug(raw: &str) -> Slug {
    Slug::parse(raw).expect("a slug")
}

pub(super) fn limit(count: u32, window_secs: u32) -> RateLimit {
    RateLimit::new(count, window_secs).expect("a rate limit")
}

/// A limit no test reaches.
pub(super) fn unlimited() -> RateLimit {
    limit(1_000_000, 60)
}

/// `poster`'s post rate counter, on one primary, within no limit.
pub(super) fn post_gate(poster: &str) -> crate::store::shards::Gate {
    gate(
        keys::user_rate(poster, crate::rate::RateAction::Post),
        unlimited(),
    )
}

/// A script's own rate limit on `key` (one primary: counted in the script).
pub(super) fn gate(key: impl Into<String>, limit: RateLimit) -> crate::store::shards::Gate {
    crate::store::shards::Gate {
        key: key.into(),
        count: limit.count(),
        window_secs: limit.window_secs(),
    }
}

/// `voter`'s vote on article `id`, within no limit.
pub(super) async fn vote_as(
    conn: &mut Conn,
    id: ArticleId,
    voter: &str,
    dir: crate::domain::VoteDirection,
) -> VoteReply {
    vote_within(conn, id, voter, dir, unlimited()).await
}

/// `voter`'s vote on article `id`, counted against `limit`.
pub(super) async fn vote_within(
    conn: &mut Conn,
    id: ArticleId,
    voter: &str,
    dir: crate::domain::VoteDirection,
    limit: RateLimit,
) -> VoteReply {
    let rate = gate(keys::user_rate(voter, crate::rate::RateAction::Vote), limit);
    let voted = vote(conn, (At::SINGLE, id), &user(voter), dir, rate, false).await;
    voted.expect("the vote script runs").0
}

/// Redis' clock, as the scripts read it.
pub(super) async fn redis_now(conn: &mut Conn) -> f64 {
    let (secs, micros): (String, String) = q(conn, &cmd("TIME")).await;
    secs.parse::<f64>().unwrap() + micros.parse::<f64>().unwrap() / 1e6
}

/// Posts an article as `poster` with no limit in the way; answers its id
/// and slug.
pub(super) async fn posted(
    conn: &mut Conn,
    poster: &str,
    stem: &str,
    in_groups: &[&str],
) -> (ArticleId, String) {
    let stem = slug(stem);
    let text = ("A title", "https://example.com/", &stem);
    let rate = (post_gate(poster), 0);
    let reply = post(
        conn,
        (At::SINGLE, 1),
        &user(poster),
        text,
        &groups(in_groups),
        rate,
    )
    .await
    .expect("the post script runs");
    match reply.0 {
        PostReply::Posted { id, slug } => (id, slug),
        other => panic!("not posted: {other:?}"),
    }
}

/// What the deriver receives, on one connection as it does: the keyspace
/// notifications it follows (turned on with votegraph's flags) and the
/// vote and post events.
pub(super) struct Followed {
    messages: futures_util::stream::LocalBoxStream<'static, redis::Msg>,
}

impl Followed {
    pub(super) async fn start(redis: &TestRedis) -> Self {
        use futures_util::StreamExt;
        let mut conn = redis.conn().await;
        let flags = ["SET", "notify-keyspace-events", "Kgs"];
        let () = q(&mut conn, cmd("CONFIG").arg(&flags)).await;
        let client = redis::Client::open(redis.url()).unwrap();
        let mut pubsub = client.get_async_pubsub().await.unwrap();
        pubsub.psubscribe(keys::keyspace_patterns(0)).await.unwrap();
        pubsub
            .subscribe(&[keys::SCORE_CHANNEL, keys::POSTED_CHANNEL])
            .await
            .unwrap();
        Self {
            messages: pubsub.into_on_message().boxed_local(),
        }
    }

    /// The keys notified before the next event, and the event.
    pub(super) async fn until_event(&mut self) -> (Vec<String>, serde_json::Value) {
        use futures_util::StreamExt;
        let mut notified = Vec::new();
        loop {
            let m = tokio::time::timeout(Duration::from_secs(5), self.messages.next())
                .await
                .expect("an event within 5 s")
                .expect("the subscription is open");
            let channel = m.get_channel_name();
            if channel == keys::SCORE_CHANNEL || channel == keys::POSTED_CHANNEL {
                let payload: String = m.get_payload().unwrap();
                return (notified, serde_json::from_str(&payload).unwrap());
            }
            notified.push(keys::notified_key(channel, 0).unwrap().to_owned());
        }
    }
}

/// A sorted set's members and scores, lowest first.
pub(super) async fn zset(conn: &mut Conn, key: &str) -> Vec<(String, f64)> {
    q(
        conn,
        cmd("ZRANGE").arg(key).arg(0).arg(-1).arg("WITHSCORES"),
    )
    .await
}

// --- the machinery ----------------------------------------------------------

/// With `--wait-replicas`, a write goes in one pipeline with `WAIT`: a
/// script flushed from Redis (a restarted primary) is loaded again, and a
/// write the replicas did not acknowledge is answered `NOT_REPLICATED`
/// (though done). Reads do not wait.
#[tokio::test]
async fn writes_wait_for_replicas_and_load_a_flushed_script_again() {
    let redis = TestRedis::start().await;
    let c = &mut redis
        .conn_waiting(Some((0, Duration::from_millis(100))))
        .await;
    let () = q(c, cmd("SCRIPT").arg("FLUSH")).await;
    assert_eq!(posted(c, "alice", "hello", &[]).await.0, ArticleId(1));

    let c = &mut redis
        .conn_waiting(Some((1, Duration::from_millis(50))))
        .await;
    let stem = slug("x");
    let text = ("t", "https://example.com/", &stem);
    let rate = (post_gate("alice"), 0);
    let reply = post(c, (At::SINGLE, 1), &user("alice"), text, &[], rate).await;
    assert!(
        matches!(
            reply,
            Err(crate::error::AppError::NotReplicated {
                acked: 0,
                wanted: 1
            })
        ),
        "{reply:?}"
    );
    let ids: u64 = q(c, cmd("GET").arg(crate::store::keys::ARTICLE_IDS)).await;
    assert_eq!(ids, 2);
    let () = q(c, cmd("SCRIPT").arg("FLUSH")).await;
    let page = directory(c, At::SINGLE, None, 10).await.unwrap();
    assert_eq!((page.total, page.members), (0, vec![]));
}

// --- replies ------------------------------------------------------------

fn reply(items: &[&str]) -> Value {
    Value::Array(
        items
            .iter()
            .map(|s| Value::BulkString(s.as_bytes().to_vec()))
            .collect(),
    )
}

/// A reply no type knows (a status of another script, a refusal
/// without its seconds, not a list, pairs missing a score) is not guessed
/// at; the scripts' tests read every known reply.
#[test]
fn unknown_replies_are_refused() {
    assert_eq!(
        ScoredMembers::read(&reply(&["article:1", "12.5", "article:2"])),
        None
    );
    assert_eq!(VoteReply::read(&reply(&["posted", "0"])), None);
    assert_eq!(VoteReply::read(&reply(&["limited", "0"])), None);
    assert_eq!(VoteReply::read(&reply(&["changed", "0"])), None);
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

// --- the .lua files ---------------------------------------------------------

/// `src/store/lua`.
fn lua_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store/lua")
}

/// Every `.lua` file under `dir`, as (path from `src/store/lua`, text).
fn lua_files(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).expect("src/store/lua") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            lua_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "lua") {
            let name = path.strip_prefix(lua_dir()).unwrap().display().to_string();
            out.push((name, std::fs::read_to_string(&path).unwrap()));
        }
    }
}

fn all_lua() -> Vec<(String, String)> {
    let mut files = Vec::new();
    lua_files(&lua_dir(), &mut files);
    files.sort();
    files
}

/// A Lua text without its comments (`--` to the end of the line, outside
/// strings), so that prose is not read as code.
fn code(body: &str) -> String {
    let mut out = String::new();
    for line in body.lines() {
        let mut quote = None;
        let mut chars = line.char_indices().peekable();
        let mut end = line.len();
        while let Some((i, c)) = chars.next() {
            match quote {
                Some(q) if c == q => quote = None,
                Some(_) if c == '\\' => {
                    chars.next();
                }
                Some(_) => {}
                None if c == '\'' || c == '"' => quote = Some(c),
                None if line[i..].starts_with("--") => {
                    end = i;
                    break;
                }
                None => {}
            }
        }
        out.push_str(&line[..end]);
        out.push('\n');
    }
    out
}

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

/// Keys reach the scripts in KEYS, or as prefixes in ARGV: no `.lua` file
/// spells one. Redis keys are recognised by a `:` or a `.` (every key of
/// the keyspace has one, `slug.to.id` a dot; no hash field or command name
/// does; format strings such as `%.6f` are skipped, and so are the patterns
/// that read a field of `INFO`, such as `used_memory:(%d+)`).
#[test]
fn no_script_spells_a_key() {
    let files = all_lua();
    assert!(files.len() >= 20, "{} .lua files", files.len());
    for (name, body) in &files {
        let code = code(body);
        let literals = literals(&code);
        assert!(!literals.is_empty(), "{name} has no string");
        for literal in literals {
            if literal.ends_with(":(%d+)") {
                continue;
            }
            assert!(
                !literal.contains(':') && (literal.starts_with('%') || !literal.contains('.')),
                "{name} spells {literal:?}"
            );
        }
    }
    // The check itself sees a key when there is one, and only in code.
    assert_eq!(
        literals(&code(
            "redis.call('ZADD', 'score:', 1, x) -- the book's 'score:'"
        )),
        ["ZADD", "score:"]
    );
}

/// Nothing is written into the Lua when it is loaded, so no file holds a
/// placeholder such as `$WEEK` (a `$` ends a Lua pattern, never a name).
#[test]
fn no_script_holds_a_placeholder() {
    for (name, body) in all_lua() {
        let code = code(&body);
        let placeholder = code
            .split('$')
            .skip(1)
            .any(|after| after.starts_with(|c: char| c.is_ascii_alphabetic()));
        assert!(!placeholder, "{name} holds a placeholder");
    }
}

/// Every `.lua` file is loaded by a script module (an `include_str!` of
/// `../lua/<file>`): none is left behind, unused and untested.
#[test]
fn every_lua_file_is_loaded() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store/scripts");
    let rust: String = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    for (name, _) in all_lua() {
        assert!(
            rust.contains(&format!("include_str!(\"../lua/{name}\")")),
            "no script loads {name}"
        );
    }
}

// --- karma ----------------------------------------------------------------

/// The karma score of `lua/lib/karma.lua`, in Rust's (IEEE-754) doubles,
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
