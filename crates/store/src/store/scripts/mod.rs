//! The Lua scripts behind every multi-key write, how each is called, and
//! what each answers. A script runs atomically, so a write happens entirely
//! or not at all however many servers race; time comes from Redis' own
//! clock (`TIME`), so every instance agrees on it.
//!
//! Each script's Lua is a file of `src/store/lua/` (functions several share
//! are in `lua/lib/`, see [`library`]), loaded by its feature's module here,
//! whose call function is the one place its `KEYS` and `ARGV` are laid out;
//! the Lua names them as locals. Every key comes in `KEYS` or is built from
//! prefixes in `ARGV` (see `keys.rs`), and so does every number defined in
//! Rust: a unit test checks that no `.lua` file spells a key. Each script
//! answers `{status, values…}`, read into its own reply type by
//! [`Lua::call`]; a reply no type knows is an [`AppError::Internal`].

mod accounts;
mod derive;
mod directory;
mod documents;
mod feeds;
mod groups;
mod library;
mod moderation;
mod post;
mod queued;
mod slugs;
mod top;
mod views;
mod vote;

#[cfg(test)]
mod tests;

use std::marker::PhantomData;
use std::sync::LazyLock;

use redis::{Script, ScriptInvocation, Value};

use super::keys::{self, At};
use super::{value_f64, value_str, Conn};
use crate::domain::GroupName;
use crate::domain::{Period, Ranking};
use crate::error::{AppError, AppResult};
use crate::rate::RateLimit;

pub use accounts::{
    end_session, index_names, log_in, login_attempt, session_user, session_votes, sessions_alive,
    sign_up, LogInReply, LoginAttemptReply, SessionVotes, SignUpReply,
};
pub use derive::{
    derive_articles, derive_group, drop_absent, index_voters, sweep_articles, Derived,
    GroupDerived, GroupMode,
};
pub use directory::directory;
pub use documents::{register_document, RegisterLimits, RegisterReply};
pub use feeds::{feed, FeedReply, FeedSource, Start};
pub use groups::{group_page, set_groups, SetGroupsReply};
pub use moderation::{
    count_admins, flag, moderate_article, moderate_user, modlog_page, next_admins_guard, Acting,
    Actor, AdminsCheck, AdminsGuard, ModLogFilter, ModLogRecord, ModerationReply, UserAction,
};
pub use post::{post, PostReply};
pub use queued::{apply_queued_vote, QueuedVote, Queuing};
pub use slugs::{free_slug, rename_slug, RenameSlugReply};
pub use top::{prune_top, TopCursor};
pub use views::{view, ViewReply};
pub use vote::{vote, VoteReply};

/// A script's reply, read from what the script returned. A `…Limited(n)`
/// reply is a rate limit's refusal, whose window ends in `n` seconds.
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
    /// Builds a script from its parts, joined in order: the [`library`]
    /// functions it calls, then its body (each an `include_str!` of a
    /// `.lua` file). Nothing is written into them: names and numbers come in
    /// KEYS and ARGV.
    fn new(name: &'static str, parts: &[&str]) -> Self {
        Self {
            name,
            script: Script::new(&parts.concat()),
            write: false,
            reply: PhantomData,
        }
    }

    /// A script that writes nothing, declared so (Redis 7's `no-writes`
    /// flag): it runs while writes are paused (`CLIENT PAUSE WRITE`, a
    /// failover's handover), where another script would wait.
    fn read_only(name: &'static str, parts: &[&str]) -> Self {
        Self::new(name, &[&["#!lua flags=no-writes\n"], parts].concat())
    }

    /// A script that makes a user's write (see [`Lua::call`]).
    fn write(name: &'static str, parts: &[&str]) -> Self {
        Self {
            write: true,
            ..Self::new(name, parts)
        }
    }

    fn invocation(&self) -> ScriptInvocation<'_> {
        self.script.prepare_invoke()
    }

    /// The call `invocation` makes, as a command for a pipeline.
    fn pipelined(&'static self, invocation: &ScriptInvocation<'_>) -> Call {
        let mut pipe = redis::pipe();
        pipe.invoke_script(invocation);
        let cmd = pipe.cmd_iter().next().cloned().unwrap_or_default();
        Call {
            cmd,
            script: &self.script,
        }
    }

    /// Runs the script (one EVALSHA, or EVAL after a NOSCRIPT) and reads
    /// its reply.
    ///
    /// A write, with `--wait-replicas N`, goes in one pipeline with `WAIT N
    /// timeout`: no extra round trip when the replicas keep up, and the
    /// answer comes only once they have it, or is `NOT_REPLICATED`. A
    /// pipelined script is not loaded again by redis-rs after `NOSCRIPT`
    /// (a restarted or new primary), so that is done here. A write that
    /// got no answer is `OUTCOME_UNKNOWN` (see [`AppError::of_write`]).
    async fn call(&self, invocation: &ScriptInvocation<'_>, conn: &mut Conn) -> AppResult<R> {
        let reply: Value = match (self.write, conn.wait()) {
            (true, Some((replicas, timeout))) => {
                waiting(invocation, conn, replicas, timeout).await?
            }
            (true, None) => invocation
                .invoke_async(conn)
                .await
                .map_err(AppError::of_write)?,
            (false, _) => invocation.invoke_async(conn).await?,
        };
        R::read(&reply).ok_or_else(|| {
            AppError::Internal(format!("the {} script answered {reply:?}", self.name))
        })
    }
}

/// A script's call as a command of its own, sent in one pipeline with
/// other shards' reads (see `Store::merged_ranking`). redis-rs loads no
/// script that a pipeline met NOSCRIPT for, so the script goes with it.
pub struct Call {
    pub cmd: redis::Cmd,
    pub script: &'static Script,
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
            Err(e) => return Err(AppError::of_write(e)),
        }
    }
}

/// Counts a call against `limit` on its counter's shard (see
/// `shards.rs`): 0 when within the limit, else the seconds to wait.
static COUNT_RATE: LazyLock<Lua<Counted>> = LazyLock::new(|| {
    Lua::new(
        "count-rate",
        &[library::RATE_LIMIT, include_str!("../lua/count_rate.lua")],
    )
});

pub async fn count_rate(conn: &mut Conn, key: String, limit: RateLimit) -> AppResult<u64> {
    let mut invocation = COUNT_RATE.invocation();
    invocation
        .key(key)
        .arg(limit.count())
        .arg(limit.window_secs());
    Ok(COUNT_RATE.call(&invocation, conn).await?.0)
}

/// Applies changes queued in `source`'s outbox on shard `at` (see
/// `outbox.rs`).
static APPLY_OUTBOX: LazyLock<Lua<Counted>> = LazyLock::new(|| {
    Lua::write(
        "apply-outbox",
        &[
            library::KARMA,
            library::GROUP_SIZES,
            library::INDEX_TIME,
            library::VOTE_INDEX,
            library::QUEUED_VOTE,
            include_str!("../lua/apply_outbox.lua"),
        ],
    )
});

pub async fn apply_outbox(
    conn: &mut Conn,
    at: At,
    source: keys::Shard,
    entries: &[&crate::store::outbox::Entry],
) -> AppResult<u64> {
    let mut invocation = APPLY_OUTBOX.invocation();
    invocation
        .key(at.key(keys::KARMA))
        .key(at.key(keys::GROUPS_BY_SIZE))
        .key(at.key(keys::OUTBOX_APPLIED))
        .arg(source.0)
        .arg(at.tag())
        .arg(keys::USER_VOTES_SUFFIX)
        .arg(keys::USER_VOTES_AHEAD_SUFFIX)
        .arg(keys::VOTING_WINDOW_SECS);
    for e in entries {
        invocation
            .arg(&e.id)
            .arg(e.kind)
            .arg(&e.whose)
            .arg(&e.article)
            .arg(&e.delta)
            .arg(&e.at);
    }
    Ok(APPLY_OUTBOX.call(&invocation, conn).await?.0)
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

/// A script's `{status, n}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counted(pub u64);

impl ScriptReply for Counted {
    fn read(reply: &Value) -> Option<Self> {
        match status(reply)? {
            ("pruned" | "indexed" | "counted" | "applied" | "ended" | "freed", [n]) => {
                Some(Self(value_f64(n)? as u64))
            }
            _ => None,
        }
    }
}

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

/// The KEYS of one group named in a call, in the order the group loops of
/// the post and set-groups scripts read them ([`GROUP_KEYS`] of them):
/// `group:<g>`, `score:<g>`, `time:<g>`, then `group:<g>:top:<period>` for
/// each of [`Period::ALL`], and last the group's mirror
/// (`group:<g>:indexed`, see `derive_group.lua`).
fn group_keys(invocation: &mut ScriptInvocation<'_>, at: At, group: &GroupName) {
    invocation
        .key(at.key(keys::group(group)))
        .key(at.key(keys::group_ranking(group, Ranking::Score)))
        .key(at.key(keys::group_ranking(group, Ranking::Time)));
    for period in Period::ALL {
        invocation.key(at.key(keys::group_top(group, period)));
    }
    invocation.key(at.key(keys::group_indexed(group)));
}

/// Where a script on `at` puts a change that belongs to another shard
/// (`key`: `karma:`, the group directory): `key` itself on one primary;
/// in the cluster layout, the shard's outbox (see `outbox.rs`).
fn or_outbox(at: At, key: &'static str) -> &'static str {
    match at.layout.is_cluster() {
        true => keys::OUTBOX,
        false => key,
    }
}

fn karma_or_outbox(at: At) -> &'static str {
    or_outbox(at, keys::KARMA)
}

/// Where a script on `at` writes `voter`'s vote index: the index, or the
/// shard's outbox (and "1") when the index is on another shard.
fn index_or_outbox(at: At, voter: &crate::domain::UserName) -> (String, &'static str) {
    if at.layout.of_user(voter) == at.shard {
        (at.key(keys::user_votes(voter.as_str())), "")
    } else {
        (at.key(keys::OUTBOX), "1")
    }
}

fn via_outbox(at: At) -> &'static str {
    if at.layout.is_cluster() {
        "1"
    } else {
        ""
    }
}

/// KEYS per group in [`group_keys`] (the Lua loops' stride, passed in ARGV).
const GROUP_KEYS: usize = 4 + Period::ALL.len();

/// Members sharing the value of a feed cursor whose own member moved,
/// read to find where the page starts (ties are rare: values hold times).
/// The directory's cursors are bounded alike.
const MAX_TIES: usize = 1000;

/// The five `top:<period>` keys, in [`Period::ALL`]'s order.
fn top_keys(invocation: &mut ScriptInvocation<'_>, at: At) {
    for period in Period::ALL {
        invocation.key(at.key(keys::top(period)));
    }
}
