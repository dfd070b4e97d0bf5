//! Voting: a voter's up, down or cleared vote on an article, with its
//! score, karma, rankings and vote index moved in one script
//! (`lua/vote.lua`).

use std::sync::LazyLock;

use redis::Value;

use super::library::{INDEX_TIME, KARMA, RATE_LIMIT, VOTE_INDEX};
use super::{seconds, status, Lua, Prelude, ScriptReply};
use crate::domain::VoteDirection;
use crate::domain::{ArticleId, UserName};
use crate::domain::{Period, Ranking};
use crate::error::AppResult;
use crate::rate::RateAction;
use crate::rate::RateLimit;
use crate::store::keys;
use crate::store::Conn;

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
static VOTE: LazyLock<Lua<VoteReply>> = LazyLock::new(|| {
    Lua::write_bound(
        "vote",
        constants(),
        &[
            KARMA,
            RATE_LIMIT,
            INDEX_TIME,
            VOTE_INDEX,
            include_str!("../lua/vote.lua"),
        ],
    )
});

/// What the vote script binds rather than takes in KEYS and ARGV: every
/// name and number that is the same for every vote (see the module docs).
pub(super) fn constants() -> Prelude {
    Prelude::default()
        .text("by_time", keys::TIME)
        .text("by_score", keys::SCORE)
        .text("karma", keys::KARMA)
        .texts("top", Period::ALL.iter().map(|p| keys::top(*p)))
        .texts("periods", Period::ALL.iter().map(|p| p.name().to_owned()))
        .text("user_prefix", keys::USER_PREFIX)
        .text(
            "user_score_suffix",
            keys::user_articles_suffix(Ranking::Score),
        )
        .text("user_top_infix", keys::USER_TOP_INFIX)
        .text("group_prefix", keys::GROUP_PREFIX)
        .text("group_top_infix", keys::GROUP_TOP_INFIX)
        .text("group_score_prefix", keys::ranking_key(Ranking::Score))
        .text("cached_suffix", keys::CACHED_SUFFIX)
        .text("score_channel", keys::SCORE_CHANNEL)
        .number("week", keys::VOTING_WINDOW_SECS)
        .number("vote_score", whole(keys::VOTE_SCORE))
        .number("top_step", whole(keys::TOP_STEP))
}

/// A whole number defined as an `f64` (the script prints its multiples as
/// integers); a fraction would be a change of the keyspace, caught by the
/// vote tests as scores off by it.
fn whole(value: f64) -> u64 {
    value as u64
}

impl VoteDirection {
    fn as_arg(self) -> &'static str {
        match self {
            VoteDirection::Up => "up",
            VoteDirection::Down => "down",
            VoteDirection::Neither => "none",
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
        .key(keys::voted(id))
        .key(keys::downvoted(id))
        .key(keys::article_groups(id))
        .key(keys::user_votes(voter.as_str()))
        .arg(id.0)
        .arg(keys::member(voter))
        .arg(direction.as_arg())
        .arg(limit.count())
        .arg(limit.window_secs());
    VOTE.call(&invocation, conn).await
}
