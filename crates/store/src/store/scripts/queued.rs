//! A vote queued in its article's shard's outbox for its voter's index on
//! another shard (the cluster layout, see `outbox.rs`), and its
//! application there before the write answers (`lua/apply_queued_vote.lua`),
//! so that the voter sees the vote on every instance once it answers. The
//! drain applies the entry again later, which changes nothing (see
//! `lua/lib/queued_vote.lua`).

use std::sync::LazyLock;

use redis::Value;

use super::library::{INDEX_TIME, QUEUED_VOTE, VOTE_INDEX};
use super::{Counted, Lua, ScriptReply};
use crate::domain::UserName;
use crate::error::AppResult;
use crate::store::keys::{self, At, Shard};
use crate::store::{value_str, Conn};

/// What a vote or post script queued for the voter's index: the outbox
/// entry's id, its index value and its time, as the drain will read them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedVote {
    pub entry: String,
    pub value: String,
    pub at: String,
}

/// A script's reply `R`, and the vote it queued, if any: the scripts put
/// `'queued', id, value, time` after their own reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queuing<R>(pub R, pub Option<QueuedVote>);

impl<R: ScriptReply> ScriptReply for Queuing<R> {
    fn read(reply: &Value) -> Option<Self> {
        let Value::Array(items) = reply else {
            return None;
        };
        let tail = items.len().checked_sub(4).map(|at| items.split_at(at));
        match tail {
            Some((own, [marker, entry, value, at])) if value_str(marker) == Some("queued") => {
                let queued = QueuedVote {
                    entry: value_str(entry)?.to_owned(),
                    value: value_str(value)?.to_owned(),
                    at: value_str(at)?.to_owned(),
                };
                Some(Self(R::read(&Value::Array(own.to_vec()))?, Some(queued)))
            }
            _ => Some(Self(R::read(reply)?, None)),
        }
    }
}

static APPLY_QUEUED_VOTE: LazyLock<Lua<Counted>> = LazyLock::new(|| {
    Lua::write(
        "apply-queued-vote",
        &[
            INDEX_TIME,
            VOTE_INDEX,
            QUEUED_VOTE,
            include_str!("../lua/apply_queued_vote.lua"),
        ],
    )
});

/// Applies `queued`, a vote of `voter` on `article` (its member) queued in
/// `source`'s outbox, to the voter's index on their shard `at`. 1 when
/// applied, 0 when a drain or a newer vote got there first.
pub async fn apply_queued_vote(
    conn: &mut Conn,
    (at, source): (At, Shard),
    voter: &UserName,
    article: &str,
    queued: &QueuedVote,
) -> AppResult<u64> {
    let mut invocation = APPLY_QUEUED_VOTE.invocation();
    invocation
        .key(at.key(keys::user_votes(voter.as_str())))
        .key(at.key(keys::user_votes_ahead(voter.as_str())))
        .key(at.key(keys::OUTBOX_APPLIED))
        .arg(source.0)
        .arg(&queued.entry)
        .arg(article)
        .arg(&queued.value)
        .arg(&queued.at)
        .arg(keys::VOTING_WINDOW_SECS);
    Ok(APPLY_QUEUED_VOTE.call(&invocation, conn).await?.0)
}
