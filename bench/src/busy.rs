//! The logged-in front page while votes land on it: readers as in "front
//! page, logged in", and beside them a paced stream of votes on the page's
//! own articles. Each vote reaches the shared template of the page (see
//! `src/templates.rs`: dropped, and computed again by the next reader), so
//! this measures what a reader pays when the page they read keeps
//! changing, which the quiet scenario never shows.
//!
//! The stream is open-loop: votes leave on a fixed schedule, each on its own
//! task, whatever the server's latency, so a slow server gets the same
//! votes per second rather than fewer (as a closed loop would give it).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;
use tokio::sync::oneshot;
use tokio::task::{JoinHandle, JoinSet};

use crate::load::{page_query, vote_query_in, Gql};
use crate::seed::token;

pub const NAME: &str = "front page, logged in, busy";

/// The fewest distinct readers the scenario cycles over, whatever
/// `--users` gives: with fewer, a reader's own votes would be read back
/// so often that the page would stop looking like many people's.
pub const MIN_READERS: usize = 200;

/// Seconds of votes the stream may send past warm-up and measurement
/// before it runs out of fresh voters: the measurement ends when its last
/// request answers, which a loaded server may take a while to do.
const TAIL_SECS: f64 = 5.0;

/// What the vote stream of the busy scenario did.
#[derive(Debug, Clone, Serialize)]
pub struct VoteStream {
    /// Votes per second asked for (`--busy-votes`).
    pub target_per_s: f64,
    /// Votes that answered without errors, per second of measurement.
    pub landed_per_s: f64,
    /// Votes sent during the measurement, and of those, the ones that
    /// answered without errors.
    pub sent: u64,
    pub landed: u64,
    /// Votes that failed, over the whole stream (warm-up included): any
    /// refused vote means the page was not as busy as the name says.
    pub errors: u64,
    /// The front-page articles the votes went to (those open to voting).
    pub articles: Vec<u64>,
    /// Distinct readers the page requests cycled over.
    pub readers: usize,
    /// The server's response cache over the scenario, warm-up included:
    /// misses (a template recomputed, or waited for), and entries the votes
    /// dropped.
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub cache_evicted_by_votes: u64,
}

/// How many voters a stream of `rate` votes per second needs so that
/// every vote comes from a user who has not voted in it before.
pub fn voters_needed(rate: f64, warmup: Duration, duration: Duration) -> usize {
    (rate * (warmup.as_secs_f64() + duration.as_secs_f64() + TAIL_SECS)).ceil() as usize
}

/// The articles of the front page (as `page_query(1)` returns them, in
/// page order) that are open to voting: a vote on a closed one is refused,
/// and a vote elsewhere would not touch the page being read.
pub async fn targets(gql: &Gql, open: &[u64]) -> anyhow::Result<Vec<u64>> {
    let page = gql
        .article_ids(page_query(1))
        .await
        .context("reading the front page's articles for the busy scenario")?;
    let open: HashSet<u64> = open.iter().copied().collect();
    let targets: Vec<u64> = page.into_iter().filter(|id| open.contains(id)).collect();
    if targets.is_empty() {
        bail!("no article on the front page is open to voting; seed more articles");
    }
    Ok(targets)
}

/// A vote stream under way; [`Stream::stop`] ends it.
pub struct Stream {
    stop: oneshot::Sender<()>,
    targets: Arc<Vec<u64>>,
    task: JoinHandle<Tally>,
    duration: Duration,
    target_per_s: f64,
}

/// What the stream counted.
#[derive(Default)]
struct Tally {
    sent: u64,
    landed: u64,
    errors: u64,
}

impl Tally {
    fn add(&mut self, measured: bool, ok: bool) {
        if measured {
            self.sent += 1;
            self.landed += u64::from(ok);
        }
        self.errors += u64::from(!ok);
    }
}

/// Starts `rate` votes per second on `targets`, by users `first_voter`
/// onwards (`voters` of them, each with a session), counting the votes
/// sent after `warmup` and for `duration` as measured, as [`crate::load::run`]
/// counts requests.
pub fn start(
    gql: Gql,
    targets: Vec<u64>,
    rate: f64,
    first_voter: usize,
    voters: usize,
    warmup: Duration,
    duration: Duration,
) -> Stream {
    let (stop, mut stopped) = oneshot::channel();
    let targets = Arc::new(targets);
    let started = Instant::now();
    let (measure_from, measure_until) = (started + warmup, started + warmup + duration);
    let articles = targets.clone();
    let task = tokio::spawn(async move {
        let targets = articles;
        let mut tally = Tally::default();
        let mut in_flight = JoinSet::new();
        // Burst (the default) catches up on ticks the bench missed while
        // busy, so the schedule, not the bench's own load, sets the rate.
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
        let mut k = 0usize;
        loop {
            tokio::select! {
                biased;
                _ = &mut stopped => break,
                _ = tick.tick() => {}
            }
            let now = Instant::now();
            let measured = now >= measure_from && now < measure_until;
            // Pairs of votes on one article, up by one fresh voter then
            // down by the next: every vote moves the score (a fresh
            // voter's NONE would be a no-op), both ways, and it comes back
            // after each pair, so the page keeps its articles. Each voter
            // votes once (they only repeat if the stream outlives its
            // voters), far inside the per-user vote limit.
            let id = targets[(k / 2) % targets.len()];
            let direction = if k.is_multiple_of(2) { "UP" } else { "DOWN" };
            let user = first_voter + k % voters.max(1);
            k += 1;
            let g = gql.clone();
            in_flight.spawn(async move {
                let ok = g
                    .post(vote_query_in(id, direction), Some(&token(user)))
                    .await;
                (measured, ok)
            });
            while let Some(done) = in_flight.try_join_next() {
                let (measured, ok) = done.unwrap_or((true, false));
                tally.add(measured, ok);
            }
        }
        // Every vote sent is answered before the scenario ends, so none is
        // left running into the next one.
        while let Some(done) = in_flight.join_next().await {
            let (measured, ok) = done.unwrap_or((true, false));
            tally.add(measured, ok);
        }
        tally
    });
    Stream {
        stop,
        targets,
        task,
        duration,
        target_per_s: rate,
    }
}

impl Stream {
    /// Stops sending, waits for the votes in flight, and reports.
    pub async fn stop(self, readers: usize) -> VoteStream {
        let _ = self.stop.send(());
        // A vote task that panicked reports nothing landed and one error,
        // so the scenario cannot pass as clean.
        let tally = self.task.await.unwrap_or(Tally {
            errors: 1,
            ..Tally::default()
        });
        VoteStream {
            target_per_s: self.target_per_s,
            landed_per_s: tally.landed as f64 / self.duration.as_secs_f64(),
            sent: tally.sent,
            landed: tally.landed,
            errors: tally.errors,
            articles: self.targets.to_vec(),
            readers,
            cache_hits: 0,
            cache_misses: 0,
            cache_evicted_by_votes: 0,
        }
    }
}
