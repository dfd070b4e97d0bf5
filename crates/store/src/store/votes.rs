//! The per-user vote index (`user:<name>:votes`): how pages read `myVote`
//! in one command. The vote and post scripts keep it and the deriver copies
//! other writers' votes into it (see docs/keyspace.md). In the cluster
//! layout a vote on another shard than its voter's is queued there for the
//! index, and written to it before the vote answers ([`Store::index_now`]).

use std::time::{SystemTime, UNIX_EPOCH};

use redis::Value;

use super::keys::{self, Shard};
use super::scripts::{self, QueuedVote, SessionVotes};
use super::users::SessionUser;
use super::{value_f64, Store};
use crate::domain::VoteDirection;
use crate::domain::{ArticleId, UserName};
use crate::error::{AppError, AppResult};

/// Reads a user's vote from an index score: the sign is the direction, the
/// magnitude the article's post time (rounded up to the second by the
/// scripts: see `lua/lib/index_time.lua`). An article whose voting closed
/// reads NONE, as its voted sets have expired by then (the index keeps such
/// an entry until the user's next vote); rounded up, an entry reads so at
/// most a second late, never early.
pub(crate) fn vote_from_index(score: Option<f64>, now: f64) -> VoteDirection {
    match score {
        Some(s) if s.abs() + keys::VOTING_WINDOW_SECS as f64 <= now => VoteDirection::Neither,
        Some(s) if s > 0.0 => VoteDirection::Up,
        Some(s) if s < 0.0 => VoteDirection::Down,
        _ => VoteDirection::Neither,
    }
}

/// Reads the reply of `ZMSCORE user:<name>:votes article:<a> …`: one vote
/// per asked article, in order; INTERNAL when the reply is not such a list.
pub(crate) fn votes_from_reply(reply: &Value, asked: usize) -> AppResult<Vec<VoteDirection>> {
    let scores = match reply {
        Value::Array(scores) if scores.len() == asked => scores,
        _ => {
            let answer = format!("ZMSCORE of the vote index answered {reply:?}");
            return Err(AppError::Internal(answer));
        }
    };
    let now = unix_now();
    Ok(scores
        .iter()
        .map(|s| vote_from_index(value_f64(s), now))
        .collect())
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

impl Store {
    /// The session of `token_hash`, and its user's votes on `ids`, in
    /// order: one script on the session's shard, which is its user's (how
    /// a logged-in page's template is filled). None without a session.
    pub async fn session_votes(
        &self,
        token_hash: &str,
        ids: &[ArticleId],
    ) -> AppResult<Option<(SessionUser, Vec<VoteDirection>)>> {
        let at = self.layout.at(self.layout.of_session(token_hash));
        let members: Vec<String> = ids.iter().map(|&id| self.member(id).1).collect();
        let mut conn = self.conn().await?;
        let session = self.session_key(token_hash);
        match scripts::session_votes(&mut conn, at, session, &members).await? {
            SessionVotes::None => Ok(None),
            SessionVotes::Session(user, votes) => {
                Ok(Some((user, votes_from_reply(&votes, ids.len())?)))
            }
        }
    }

    /// Writes `queued`, a vote of `voter` on `id` queued in the article's
    /// shard's outbox, to the voter's index on their shard, so that the
    /// voter sees it on every instance once the write answers; the entry
    /// stays queued, for a write whose server dies before this step. The
    /// write stands whatever this answers: a failure is OUTCOME_UNKNOWN
    /// (or NOT_REPLICATED), and the write sent again writes it again.
    pub(crate) async fn index_now(
        &self,
        voter: &UserName,
        id: ArticleId,
        queued: &QueuedVote,
    ) -> AppResult<()> {
        let (source, article) = self.member(id);
        let at = self.layout.at(self.layout.of_user(voter));
        let applied = async {
            let mut conn = self.conn().await?;
            scripts::apply_queued_vote(&mut conn, (at, source), voter, &article, queued).await
        };
        match applied.await {
            Ok(_) => Ok(()),
            Err(e @ (AppError::OutcomeUnknown { .. } | AppError::NotReplicated { .. })) => Err(e),
            Err(e) => Err(AppError::OutcomeUnknown {
                cause: format!("the write stands, its voter's index was not written: {e:?}"),
            }),
        }
    }

    /// The `ZMSCORE` of the viewer's index, on the viewer's shard, that
    /// reads their votes on `members`.
    pub(crate) fn vote_read(&self, viewer: &UserName, members: &[String]) -> (Shard, redis::Cmd) {
        let shard = self.layout.of_user(viewer);
        let mut read = redis::cmd("ZMSCORE");
        read.arg(self.layout.on(shard, keys::user_votes(viewer.as_str())))
            .arg(members);
        (shard, read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_scores_read_as_votes_while_voting_is_open() {
        let week = keys::VOTING_WINDOW_SECS as f64;
        let now = 1_800_000_000.0;
        let posted = now - 3_600.0;
        assert_eq!(vote_from_index(Some(posted), now), VoteDirection::Up);
        assert_eq!(vote_from_index(Some(-posted), now), VoteDirection::Down);
        assert_eq!(vote_from_index(None, now), VoteDirection::Neither);
        // Closed: the same instant the vote script closes it.
        assert_eq!(
            vote_from_index(Some(now - week), now),
            VoteDirection::Neither
        );
        assert_eq!(
            vote_from_index(Some(-(now - week)), now),
            VoteDirection::Neither
        );
        assert_eq!(
            vote_from_index(Some(now - week + 1.0), now),
            VoteDirection::Up
        );
    }

    #[test]
    fn replies_of_another_length_are_refused() {
        let reply = Value::Array(vec![Value::Nil, Value::BulkString(b"1".to_vec())]);
        assert!(votes_from_reply(&reply, 3).is_err());
        assert!(votes_from_reply(&Value::Nil, 0).is_err());
        assert_eq!(votes_from_reply(&reply, 2).map(|v| v.len()).ok(), Some(2));
    }
}
