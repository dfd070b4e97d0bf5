//! The vote-index backfill: copying the voted sets of the open voting
//! window into the voters' `user:<name>:votes` indexes, a bounded batch at
//! a time (`lua/backfill_votes.lua`).

use std::sync::LazyLock;

use redis::Value;

use super::library::{INDEX_TIME, VOTERS};
use super::{status, Lua, ScriptReply};
use crate::error::AppResult;
use crate::store::keys;
use crate::store::{value_str, Conn};

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
static BACKFILL: LazyLock<Lua<BackfillBatch>> = LazyLock::new(|| {
    Lua::new(
        "vote-index-backfill",
        &[
            INDEX_TIME,
            VOTERS,
            include_str!("../lua/backfill_votes.lua"),
        ],
    )
});

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
        .arg(keys::USER_VOTES_SUFFIX)
        .arg(keys::VOTING_WINDOW_SECS);
    BACKFILL.call(&invocation, conn).await
}
