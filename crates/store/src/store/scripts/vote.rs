//! Voting: a voter's up, down or cleared vote on an article, with its
//! score, karma, rankings and vote index moved in one script
//! (`lua/vote.lua`).

use std::sync::LazyLock;

use redis::Value;

use super::library::{INDEX_TIME, KARMA, RATE_LIMIT, VOTE_INDEX};
use super::{index_or_outbox, karma_or_outbox, via_outbox};
use super::{seconds, status, top_keys, Lua, Queuing, ScriptReply};
use crate::domain::VoteDirection;
use crate::domain::{ArticleId, UserName};
use crate::domain::{Period, Ranking};
use crate::error::AppResult;
use crate::store::keys::{self, At};
use crate::store::shards::Gate;
use crate::store::Conn;

/// What the vote script answered. Every vote counts against the limit,
/// whatever its outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VoteReply {
    Limited(u64),
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
        Some(match status(reply)? {
            ("limited", v) => Self::Limited(seconds(v)?),
            ("missing", []) => Self::Missing,
            ("closed", []) => Self::Closed,
            ("same", []) => Self::Same,
            ("changed", []) => Self::Changed,
            _ => return None,
        })
    }
}

/// Casts a vote.
///
/// The voted sets keep the book's meaning: `voted:<id>` holds upvoters and
/// `downvoted:<id>` downvoters. Both sets expire when the voting window
/// closes, as the book's `voted:<id>` does. They decide the previous
/// direction; the voter's `user:<name>:votes` index, which pages read
/// `myVote` from, is written to match them in the same step (or queued for
/// the voter's shard, see `outbox.rs` and `queued.rs`), as are the
/// article's counts and rankings, its poster's karma and the cached
/// rankings that hold it, and the change is published on the score channel.
static VOTE: LazyLock<Lua<Queuing<VoteReply>>> = LazyLock::new(|| {
    Lua::write(
        "vote",
        &[
            KARMA,
            RATE_LIMIT,
            INDEX_TIME,
            VOTE_INDEX,
            include_str!("../lua/vote.lua"),
        ],
    )
});

/// A direction as the script takes it.
fn direction_arg(direction: VoteDirection) -> &'static str {
    match direction {
        VoteDirection::Up => "up",
        VoteDirection::Down => "down",
        VoteDirection::Neither => "none",
    }
}

/// Runs the vote script on the article's shard `at`; the voter's
/// `rate` is counted there or already was (see `shards.rs`). Answers
/// the vote queued for the voter's index on another shard, if any.
pub async fn vote(
    conn: &mut Conn,
    (at, id): (At, ArticleId),
    voter: &UserName,
    direction: VoteDirection,
    rate: Gate,
    moderates: bool,
) -> AppResult<Queuing<VoteReply>> {
    let (index, index_queued) = index_or_outbox(at, voter);
    let mut invocation = VOTE.invocation();
    invocation
        .key(rate.key)
        .key(index)
        .key(at.key(keys::article(id)))
        .key(at.key(keys::voted(id)))
        .key(at.key(keys::downvoted(id)))
        .key(at.key(keys::article_groups(id)))
        .key(at.key(keys::TIME))
        .key(at.key(keys::SCORE))
        .key(at.key(karma_or_outbox(at)));
    top_keys(&mut invocation, at);
    invocation
        .arg(id.0)
        .arg(keys::member(voter))
        .arg(direction_arg(direction))
        .arg(rate.count)
        .arg(rate.window_secs)
        .arg(keys::VOTING_WINDOW_SECS)
        .arg(keys::VOTE_SCORE)
        .arg(keys::TOP_STEP)
        .arg(keys::SCORE_CHANNEL)
        .arg(keys::USER_PREFIX)
        .arg(keys::CACHED_SUFFIX)
        .arg(at.key(keys::GROUP_PREFIX))
        .arg(keys::GROUP_TOP_INFIX)
        .arg(at.key(keys::ranking_key(Ranking::Score)))
        .arg(keys::user_articles_suffix(Ranking::Score))
        .arg(keys::USER_TOP_INFIX);
    for period in Period::ALL {
        invocation.arg(period.name());
    }
    invocation
        .arg(if moderates { "1" } else { "" })
        .arg(at.tag())
        .arg(via_outbox(at))
        .arg(index_queued);
    VOTE.call(&invocation, conn).await
}
