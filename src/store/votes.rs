//! The per-user vote index (`user:<name>:votes`): how pages read `myVote`
//! in one command, and the backfill that fills the index from the voted
//! sets for votes it does not hold.
//!
//! The vote and post scripts keep the index (see `index_vote` in
//! `lua/lib/vote_index.lua`), but votes written before votegraph kept it, and votes
//! written by the book's own code (`SADD voted:<id> user:<name>`), are only
//! in the voted sets. A backfill pass copies the sets of every article of
//! the voting window into the indexes. It runs once per Redis, in the
//! background at startup while the server serves: the marker
//! [`keys::VOTES_INDEX_BUILT`] says it is done. `--reconcile-votes` runs it
//! again at startup; it is needed only after the book's code has voted,
//! whose votes otherwise show as NONE in `myVote` (their counts and scores
//! are always right: those come from the hash and `score:`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Value;

use super::keys;
use super::scripts::{self, Cursor};
use super::{value_f64, Store};
use crate::domain::VoteDirection;
use crate::domain::{ArticleId, UserName};
use crate::error::{AppError, AppResult};
use tokio_util::task::AbortOnDropHandle;

/// Articles per backfill batch: a few hundred, one script call each.
const BATCH_ARTICLES: u32 = 250;
/// Voters a batch reads before it stops (after a whole article), so a
/// batch of popular articles does not hold Redis for long.
const BATCH_VOTERS: u32 = 10_000;
/// First wait before a failed pass is tried again; it doubles up to
/// [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(60);

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
/// per asked article, in order; None when the reply is not such a list.
pub(crate) fn votes_from_reply(reply: &Value, asked: usize) -> Option<Vec<VoteDirection>> {
    let Value::Array(scores) = reply else {
        return None;
    };
    if scores.len() != asked {
        return None;
    }
    let now = unix_now();
    Some(
        scores
            .iter()
            .map(|s| vote_from_index(value_f64(s), now))
            .collect(),
    )
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

/// What a backfill pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackfillReport {
    pub articles: u64,
    pub entries: u64,
    pub batches: u64,
}

/// The background backfill; dropping it stops the pass (between two
/// batches, each of which is atomic), as when the server stops.
pub struct Backfill {
    _task: AbortOnDropHandle<()>,
}

impl Store {
    /// A user's votes on `ids`, in order, with one `ZMSCORE` of their
    /// index (how a logged-in page's template is filled).
    pub async fn my_votes(
        &self,
        viewer: &UserName,
        ids: &[ArticleId],
    ) -> AppResult<Vec<VoteDirection>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut cmd = redis::cmd("ZMSCORE");
        cmd.arg(keys::user_votes(viewer.as_str()));
        for &id in ids {
            cmd.arg(keys::article(id));
        }
        let mut conn = self.conn().await?;
        let reply: Value = cmd.query_async(&mut conn).await?;
        votes_from_reply(&reply, ids.len()).ok_or_else(|| {
            AppError::Internal(format!("ZMSCORE of the vote index answered {reply:?}"))
        })
    }
}

impl Store {
    /// Runs a backfill pass unless the marker says one has run (`force`
    /// runs it anyway), then sets the marker. None when skipped.
    pub async fn backfill_vote_index(&self, force: bool) -> AppResult<Option<BackfillReport>> {
        if !force && self.has_marker(keys::VOTES_INDEX_BUILT).await? {
            return Ok(None);
        }
        let mut report = BackfillReport::default();
        let mut cursor: Option<Cursor> = None;
        loop {
            // A connection per batch: a broken one is replaced between
            // batches, and the pool is not held across the whole pass.
            let mut conn = self.conn().await?;
            let batch =
                scripts::backfill_votes(&mut conn, cursor.as_ref(), BATCH_ARTICLES, BATCH_VOTERS)
                    .await?;
            report.articles += batch.articles;
            report.entries += batch.entries;
            report.batches += 1;
            match batch.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        self.set_marker(keys::VOTES_INDEX_BUILT).await?;
        Ok(Some(report))
    }

    /// Starts the backfill in the background (see the module doc). A pass
    /// that fails (Redis down at startup) is tried again, after 0.5 s
    /// doubling to a minute, until it succeeds or the returned handle is
    /// dropped; the server serves meanwhile.
    pub fn start_vote_index_backfill(&self, force: bool) -> Backfill {
        let store = self.clone();
        let task = AbortOnDropHandle::new(tokio::spawn(async move {
            let mut wait = RETRY_FIRST;
            loop {
                match store.backfill_vote_index(force).await {
                    Ok(Some(report)) => {
                        tracing::info!(
                            articles = report.articles,
                            entries = report.entries,
                            batches = report.batches,
                            "vote index backfilled from the voted sets"
                        );
                        return;
                    }
                    Ok(None) => return,
                    Err(e) => {
                        tracing::warn!(error = %e, retry_in_ms = wait.as_millis() as u64, "vote index backfill failed");
                        tokio::time::sleep(wait).await;
                        wait = (wait * 2).min(RETRY_MAX);
                    }
                }
            }
        }));
        Backfill { _task: task }
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
        assert!(votes_from_reply(&reply, 3).is_none());
        assert!(votes_from_reply(&Value::Nil, 0).is_none());
        assert_eq!(votes_from_reply(&reply, 2).map(|v| v.len()), Some(2));
    }
}
