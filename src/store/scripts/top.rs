//! The net-vote rankings (`top:<period>`): pruning the articles that grew
//! too old for a period, and building the rankings from the book's
//! `score:` and `time:` (`lua/prune_top.lua`, `lua/build_top.lua`).

use std::sync::LazyLock;

use redis::Value;

use super::library::KARMA;
use super::{status, top_keys, Counted, Lua, ScriptReply};
use crate::domain::Period;
use crate::error::AppResult;
use crate::store::keys;
use crate::store::{value_f64, value_str, Conn};

/// Removes from `top:<period>` up to `batch` articles posted at or before
/// `cutoff`, resuming where the last call stopped (`index:top:pruned`),
/// and from the period's cached rankings of their groups and posters.
static PRUNE_TOP: LazyLock<Lua<Counted>> =
    LazyLock::new(|| Lua::new("prune-top", &[KARMA, include_str!("../lua/prune_top.lua")]));

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
        .arg(period.name())
        .arg(keys::ARTICLE_GROUPS_SUFFIX)
        .arg(keys::GROUP_PREFIX)
        .arg(keys::GROUP_TOP_INFIX)
        .arg(keys::USER_PREFIX)
        .arg(keys::USER_TOP_INFIX);
    Ok(PRUNE_TOP.call(&invocation, conn).await?.0)
}

/// Writes the net-vote scores of up to `batch` articles of `time:`, from
/// post time `from` on, derived from the book's keys: net votes =
/// (`score:` − `time:`) / 432. Answers the articles written and where the
/// next batch starts (None at the end).
static BUILD_TOP: LazyLock<Lua<BuildTopReply>> =
    LazyLock::new(|| Lua::new("build-top", &[include_str!("../lua/build_top.lua")]));

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
    invocation
        .arg(at.skip)
        .arg(keys::VOTE_SCORE)
        .arg(keys::TOP_STEP);
    BUILD_TOP.call(&invocation, conn).await
}
