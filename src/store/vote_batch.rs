//! Group commit of votes: the votes a server receives while a batch of
//! them is in Redis wait, and go together as the next batch, one run of the
//! vote script.
//!
//! **Why.** Most of what a vote costs Redis is not its own writes but what
//! surrounds them: the script's call, the clock, the five net-vote
//! rankings, karma, the look for cached rankings. A batch pays those once
//! (one `ZADD` per ranking for all its articles, one read and one write of
//! karma for all its posters), so a primary near its capacity, where votes
//! queue anyway, spends less on each vote the more there are.
//!
//! **Waiting only when busy.** A vote that finds no batch in Redis and no
//! other vote waiting goes at once, alone: a server voting slowly sends
//! batches of one, which cost what a single vote did. A small batch that
//! finds others waiting (votes came while the last batch was in Redis, so
//! more are coming) waits [`LINGER`] for more before it goes, as a
//! database's group commit waits when other transactions are about to
//! commit: a vote may wait a millisecond more, and Redis spends less on
//! each. A batch of [`LINGER_BELOW`] or more never waits: it already
//! spares Redis most of what a batch can, and while it waited nothing
//! would be in Redis (one batch at a time), which would cost a server
//! voting at its capacity more throughput than the batch saves.
//!
//! **Each vote as if alone.** The script casts a batch's votes in order,
//! each with its own rate limit, window check and reply, and writes what
//! they share at the end of the same atomic step (see `lua/vote.lua`). A
//! vote whose request has gone (its deadline passed while it waited) is
//! left out, so a client told its vote failed never sees it counted. A
//! batch Redis refuses (it is out of memory, or a key has another type,
//! written by hand) is every one of its votes' error, as a lone vote's
//! script error was: what ran before the refusal stays, and the sweep
//! brings the rankings back in line (see `deriver.rs`).
//!
//! **Bounds.** At most [`QUEUED`] votes wait; a request finding the queue
//! full waits for room within its own deadline, like any other wait for
//! Redis. One batch is in Redis at a time per server, and every batch is
//! bounded by the command timeout.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::Serialize;

use tokio::sync::{mpsc, oneshot};

use super::scripts::{self, Ballot, VoteReplies, VoteReply};
use super::Connections;
use crate::error::{AppError, AppResult};
use crate::rate::RateLimit;
use tokio_util::task::AbortOnDropHandle;

/// Most votes in one batch: a script holds Redis for its whole run, so a
/// batch is kept to a few milliseconds.
pub const MAX_BATCH: usize = 32;

/// Most votes waiting for a batch.
pub const QUEUED: usize = 1024;

/// How long a batch that found other votes waiting waits for more: about
/// what a batch spends in Redis, so the next one holds what a busy server
/// receives meanwhile.
pub const LINGER: Duration = Duration::from_millis(1);

/// The smallest batch that goes without waiting for more.
pub const LINGER_BELOW: usize = 8;

/// One vote waiting for its batch.
struct Job {
    ballot: Ballot,
    limit: RateLimit,
    reply: oneshot::Sender<AppResult<VoteReply>>,
}

/// The queue and the task that sends its batches, started by the first
/// vote (a store is made before the runtime runs). Dropping it stops the
/// task.
#[derive(Default)]
pub(super) struct VoteBatcher {
    started: OnceLock<Started>,
    counts: Arc<Counts>,
}

struct Started {
    jobs: mpsc::Sender<Job>,
    _task: AbortOnDropHandle<()>,
}

#[derive(Default)]
struct Counts {
    batches: AtomicU64,
    votes: AtomicU64,
}

/// What the batches did, for `/health`: votes sent over batches sent is
/// the mean batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VoteBatchStats {
    /// Votes waiting for a batch.
    pub queued: usize,
    /// Batches sent to Redis, and the votes they held.
    pub batches: u64,
    pub votes: u64,
}

impl VoteBatcher {
    /// Casts one vote with the batch it joins.
    pub(super) async fn cast(
        &self,
        connections: &Connections,
        ballot: Ballot,
        limit: RateLimit,
    ) -> AppResult<VoteReply> {
        let started = self.started.get_or_init(|| {
            let (jobs, queue) = mpsc::channel(QUEUED);
            let task = AbortOnDropHandle::new(tokio::spawn(send_batches(
                queue,
                connections.clone(),
                self.counts.clone(),
            )));
            Started { jobs, _task: task }
        });
        let (reply, answer) = oneshot::channel();
        let job = Job {
            ballot,
            limit,
            reply,
        };
        started
            .jobs
            .send(job)
            .await
            .map_err(|_| AppError::Internal("the vote queue is closed".to_owned()))?;
        answer
            .await
            .map_err(|_| AppError::Internal("the vote's batch was dropped".to_owned()))?
    }

    pub(super) fn stats(&self) -> VoteBatchStats {
        let queued = self
            .started
            .get()
            .map_or(0, |s| s.jobs.max_capacity() - s.jobs.capacity());
        VoteBatchStats {
            queued,
            batches: self.counts.batches.load(Ordering::Relaxed),
            votes: self.counts.votes.load(Ordering::Relaxed),
        }
    }
}

/// Takes the next batch: the first vote waiting (or `held`, one left from
/// the last batch), then every vote already waiting, up to [`MAX_BATCH`],
/// while they share its rate limit (a limit is the server's setting, so
/// they do unless it changed). When a few others were waiting (fewer than
/// [`LINGER_BELOW`] in all), it waits [`LINGER`] and takes those that came
/// meanwhile too. None once the queue is closed.
async fn next_batch(queue: &mut mpsc::Receiver<Job>, held: &mut Option<Job>) -> Option<Vec<Job>> {
    let first = match held.take() {
        Some(job) => job,
        None => queue.recv().await?,
    };
    let mut batch = vec![first];
    if take_waiting(queue, held, &mut batch) && (2..LINGER_BELOW).contains(&batch.len()) {
        tokio::time::sleep(LINGER).await;
        take_waiting(queue, held, &mut batch);
    }
    Some(batch)
}

/// Adds the votes waiting to `batch` while it has room and they share its
/// limit; false when a vote under another limit stopped it (kept in
/// `held` to start the next batch).
fn take_waiting(
    queue: &mut mpsc::Receiver<Job>,
    held: &mut Option<Job>,
    batch: &mut Vec<Job>,
) -> bool {
    let Some(limit) = batch.first().map(|job| job.limit) else {
        return true;
    };
    while batch.len() < MAX_BATCH {
        match queue.try_recv() {
            Ok(job) if job.limit == limit => batch.push(job),
            Ok(job) => {
                *held = Some(job);
                return false;
            }
            Err(_) => break,
        }
    }
    true
}

async fn send_batches(
    mut queue: mpsc::Receiver<Job>,
    connections: Connections,
    counts: Arc<Counts>,
) {
    let mut held = None;
    while let Some(mut batch) = next_batch(&mut queue, &mut held).await {
        batch.retain(|job| !job.reply.is_closed());
        let Some(limit) = batch.first().map(|job| job.limit) else {
            continue;
        };
        let ballots: Vec<Ballot> = batch.iter().map(|job| job.ballot.clone()).collect();
        counts.batches.fetch_add(1, Ordering::Relaxed);
        counts
            .votes
            .fetch_add(ballots.len() as u64, Ordering::Relaxed);
        let cast = async {
            let mut conn = connections.conn().await?;
            scripts::votes(&mut conn, &ballots, limit).await
        };
        match cast.await {
            Ok(VoteReplies(replies)) => {
                for (job, reply) in batch.into_iter().zip(replies) {
                    let _ = job.reply.send(Ok(reply));
                }
            }
            Err(e) => {
                for job in batch {
                    let _ = job.reply.send(Err(e.clone()));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{ArticleId, UserName, VoteDirection};

    fn job(n: u64, limit: RateLimit) -> (Job, oneshot::Receiver<AppResult<VoteReply>>) {
        let (reply, answer) = oneshot::channel();
        let ballot = Ballot {
            id: ArticleId(n),
            voter: UserName::parse("voter").unwrap(),
            direction: VoteDirection::Up,
        };
        (
            Job {
                ballot,
                limit,
                reply,
            },
            answer,
        )
    }

    /// A batch takes every vote already waiting, up to the most a batch
    /// holds, in order; a vote under another limit starts the next one.
    #[tokio::test]
    async fn batches_take_what_waits_up_to_their_bound() {
        let limit = RateLimit::new(10, 60).unwrap();
        let other = RateLimit::new(5, 60).unwrap();
        let (jobs, mut queue) = mpsc::channel(QUEUED);
        let mut answers = Vec::new();
        for n in 0..(MAX_BATCH as u64 + 5) {
            let (job, answer) = job(n, limit);
            jobs.send(job).await.unwrap();
            answers.push(answer);
        }
        let (odd, _answer) = job(99, other);
        jobs.send(odd).await.unwrap();
        let (last, _answer) = job(100, limit);
        jobs.send(last).await.unwrap();

        let mut held = None;
        let ids = |batch: &[Job]| batch.iter().map(|j| j.ballot.id.0).collect::<Vec<_>>();
        let first = next_batch(&mut queue, &mut held).await.unwrap();
        assert_eq!(ids(&first), (0..MAX_BATCH as u64).collect::<Vec<_>>());
        let second = next_batch(&mut queue, &mut held).await.unwrap();
        assert_eq!(
            ids(&second),
            (MAX_BATCH as u64..MAX_BATCH as u64 + 5).collect::<Vec<_>>()
        );
        let third = next_batch(&mut queue, &mut held).await.unwrap();
        assert_eq!(ids(&third), [99]);
        let fourth = next_batch(&mut queue, &mut held).await.unwrap();
        assert_eq!(ids(&fourth), [100]);
        drop(jobs);
        assert!(next_batch(&mut queue, &mut held).await.is_none());
    }

    /// A lone vote goes at once; a small batch that found others waiting
    /// waits [`LINGER`] and takes the votes that came meanwhile; a larger
    /// one goes at once.
    #[tokio::test(start_paused = true)]
    async fn a_busy_batch_waits_for_more_a_lone_vote_does_not() {
        let limit = RateLimit::new(10, 60).unwrap();
        let (jobs, mut queue) = mpsc::channel(QUEUED);
        let mut held = None;
        let ids = |batch: &[Job]| batch.iter().map(|j| j.ballot.id.0).collect::<Vec<_>>();

        let (lone, _a) = job(1, limit);
        jobs.send(lone).await.unwrap();
        let start = tokio::time::Instant::now();
        let batch = next_batch(&mut queue, &mut held).await.unwrap();
        assert_eq!((ids(&batch), start.elapsed()), (vec![1], Duration::ZERO));

        let mut answers = Vec::new();
        for n in [2, 3] {
            let (waiting, answer) = job(n, limit);
            jobs.send(waiting).await.unwrap();
            answers.push(answer);
        }
        let (late, _c) = job(4, limit);
        // Sent while the batch waits: the test's runtime runs one task at
        // a time, so this one runs once the batch's wait begins.
        let sender = jobs.clone();
        tokio::spawn(async move {
            let _ = sender.send(late).await;
        });
        let start = tokio::time::Instant::now();
        let batch = next_batch(&mut queue, &mut held).await.unwrap();
        assert_eq!((ids(&batch), start.elapsed()), (vec![2, 3, 4], LINGER));

        let large: Vec<u64> = (10..10 + LINGER_BELOW as u64).collect();
        for &n in &large {
            let (waiting, answer) = job(n, limit);
            jobs.send(waiting).await.unwrap();
            answers.push(answer);
        }
        let start = tokio::time::Instant::now();
        let batch = next_batch(&mut queue, &mut held).await.unwrap();
        assert_eq!((ids(&batch), start.elapsed()), (large, Duration::ZERO));
    }
}
