//! Voting: voters' up, down or cleared votes on articles, a batch of them
//! with their scores, karma, rankings and vote indexes moved in one script
//! (`lua/vote.lua`).

use std::sync::LazyLock;

use redis::Value;

use super::library::{INDEX_TIME, KARMA, RATE_LIMIT};
use super::{seconds, Lua, Prelude, ScriptReply};
use crate::domain::VoteDirection;
use crate::domain::{ArticleId, UserName};
use crate::domain::{Period, Ranking};
use crate::error::{AppError, AppResult};
use crate::rate::RateAction;
use crate::rate::RateLimit;
use crate::store::keys;
use crate::store::value_str;
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

/// The replies of a batch, one per vote in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoteReplies(pub Vec<VoteReply>);

impl ScriptReply for VoteReplies {
    /// A flat list, two values a vote: its status and what it carries
    /// (the seconds to wait, else 0). Nested lists would cost Redis a
    /// table's conversion each.
    fn read(reply: &Value) -> Option<Self> {
        let Value::Array(values) = reply else {
            return None;
        };
        if values.len() % 2 != 0 {
            return None;
        }
        values
            .chunks_exact(2)
            .map(|pair| {
                Some(match value_str(&pair[0])? {
                    "limited" => VoteReply::Limited {
                        retry_after_secs: seconds(&pair[1..])?,
                    },
                    "missing" => VoteReply::Missing,
                    "closed" => VoteReply::Closed,
                    "same" => VoteReply::Same,
                    "changed" => VoteReply::Changed,
                    _ => return None,
                })
            })
            .collect::<Option<Vec<_>>>()
            .map(Self)
    }
}

/// One vote of a batch: a voter's direction on an article.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ballot {
    pub id: ArticleId,
    pub voter: UserName,
    pub direction: VoteDirection,
}

/// Casts a batch of votes in one script: each answers as if cast alone, in
/// order.
///
/// The voted sets keep the book's meaning: `voted:<id>` holds upvoters and
/// `downvoted:<id>` downvoters. Both sets expire when the voting window
/// closes, as the book's `voted:<id>` does. They decide the previous
/// direction; the voter's `user:<name>:votes` index, which pages read
/// `myVote` from, is written to match them in the same step. What votes
/// share (the net-vote rankings, karma, cached rankings) is written once
/// per batch, and each change is published on the score channel, all in
/// the same step.
static VOTE: LazyLock<Lua<VoteReplies>> = LazyLock::new(|| {
    Lua::write_bound(
        "vote",
        constants(),
        &[
            KARMA,
            RATE_LIMIT,
            INDEX_TIME,
            include_str!("../lua/vote.lua"),
        ],
    )
});

/// What the vote script binds rather than takes in ARGV: every name and
/// number that is the same for every vote (see the module docs). The keys
/// of each vote are built from these prefixes and suffixes and the vote's
/// article id and voter name, which is all a vote passes.
pub(super) fn constants() -> Prelude {
    Prelude::default()
        .text("by_time", keys::TIME)
        .text("by_score", keys::SCORE)
        .text("karma", keys::KARMA)
        .texts("top", Period::ALL.iter().map(|p| keys::top(*p)))
        .texts("periods", Period::ALL.iter().map(|p| p.name().to_owned()))
        .text("article_prefix", keys::ARTICLE_PREFIX)
        .text("voted_prefix", keys::VOTED_PREFIX)
        .text("downvoted_prefix", keys::DOWNVOTED_PREFIX)
        .text("groups_suffix", keys::ARTICLE_GROUPS_SUFFIX)
        .text("user_prefix", keys::USER_PREFIX)
        .text("rate_suffix", &keys::user_rate_suffix(RateAction::Vote))
        .text("votes_suffix", keys::USER_VOTES_SUFFIX)
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
        .texts("score_moves", moves(whole(keys::VOTE_SCORE)))
        .texts("top_moves", moves(whole(keys::TOP_STEP)))
}

/// What a vote adds to a ranking for each net change it can make, −2 to
/// +2 (`moves[net + 3]` in Lua), as text: printed once here rather than
/// by every vote.
fn moves(step: u64) -> impl Iterator<Item = String> {
    (-2i64..=2).map(move |net| (net * step as i64).to_string())
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

/// Runs the vote script for a batch; each voter may vote `limit` times per
/// window. The keys of each vote are the ones [`keys::article`],
/// [`keys::voted`], [`keys::downvoted`], [`keys::article_groups`],
/// [`keys::user_rate`] and [`keys::user_votes`] name.
pub async fn votes(
    conn: &mut Conn,
    ballots: &[Ballot],
    limit: RateLimit,
) -> AppResult<VoteReplies> {
    let mut invocation = VOTE.invocation();
    invocation.arg(limit.count()).arg(limit.window_secs());
    for ballot in ballots {
        invocation
            .arg(ballot.id.0)
            .arg(ballot.voter.as_str())
            .arg(ballot.direction.as_arg());
    }
    let replies = VOTE.call(&invocation, conn).await?;
    if replies.0.len() != ballots.len() {
        return Err(AppError::Internal(format!(
            "the vote script answered {} replies for {} votes",
            replies.0.len(),
            ballots.len()
        )));
    }
    Ok(replies)
}

/// Casts one vote (a batch of one), for the script's tests.
#[cfg(test)]
pub async fn vote(
    conn: &mut Conn,
    id: ArticleId,
    voter: &UserName,
    direction: VoteDirection,
    limit: RateLimit,
) -> AppResult<VoteReply> {
    let ballot = Ballot {
        id,
        voter: voter.clone(),
        direction,
    };
    let mut replies = votes(conn, std::slice::from_ref(&ballot), limit).await?.0;
    replies
        .pop()
        .ok_or_else(|| AppError::Internal("the vote script answered no reply".to_owned()))
}
