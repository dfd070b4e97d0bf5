//! The cluster layout's outbox: a vote or a post changes its poster's
//! karma and its voter's vote index, which live on their users' shards,
//! and a post or a change of groups changes group sizes, which live on
//! each group's shard, not the article's. The script queues each change
//! in its own shard's `outbox` stream, in the same step as the write; a
//! drain applies the stream's entries to their shards and deletes them.
//!
//! Each entry is applied exactly once, whoever drains and however often:
//! a target shard keeps the id of the last entry it applied from each
//! source (`lua/apply_outbox.lua`), and every drain reads the stream from
//! its start, so a target always gets its entries in order. A server
//! killed between the vote and the drain leaves the entry in the stream
//! for the next drain: the one after the next write to that shard, or the
//! periodic pass over every shard.
//!
//! A vote's entry for its voter's index is also applied by the vote
//! itself, before it answers (`Store::index_now`); the drain then skips
//! it, and never applies an older vote over a newer one applied so
//! (`lua/lib/queued_vote.lua`).
//!
//! An outbox whose entries cannot be applied (a target shard that stays
//! unwritable) is bounded: once a drain finds it holding the limit, the
//! shard's writes are refused, unwritten, until a drain empties it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use redis::streams::{StreamId, StreamRangeReply};
use tokio_util::task::AbortOnDropHandle;

use super::keys::{self, Shard};
use super::scripts;
use super::Store;
use crate::domain::UserName;
use crate::error::{AppError, AppResult};

/// The entries an outbox may hold before its shard's writes wait
/// (`--outbox-max-entries`).
pub const DEFAULT_LIMIT: u64 = 100_000;

/// Each shard's outbox, as this instance knows it.
pub struct Outboxes {
    /// Asks a shard's drain to run soon.
    asked: Box<[tokio::sync::Notify]>,
    /// The entries each shard's outbox held when last drained.
    held: Box<[AtomicU64]>,
}

impl Outboxes {
    pub fn new(shards: usize) -> Self {
        Self {
            asked: (0..shards).map(|_| tokio::sync::Notify::new()).collect(),
            held: (0..shards).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

/// Entries read and applied per step of a drain.
const STEP: usize = 256;

/// How often every shard's outbox is drained, for entries that a killed
/// server left behind.
const PASS_EVERY: Duration = Duration::from_secs(1);

/// How long a write's entry waits for others before a drain applies them.
const GATHER: Duration = Duration::from_millis(50);

/// One queued change: its stream id, its kind (`karma` of a user's
/// member, a `vote` in a voter's index, or the size of a `group`), whose,
/// the voted article, the delta (a vote's index value) and the time.
pub struct Entry {
    pub id: String,
    pub kind: &'static str,
    pub whose: String,
    pub article: String,
    pub delta: String,
    pub at: String,
}

impl Store {
    /// Asks for `shard`'s outbox to be drained soon; the writer does not
    /// wait. A failed drain leaves the entries for the next: the write
    /// they came from stands, and its answer does not change.
    pub(crate) fn apply_outbox(&self, shard: Shard) {
        if self.layout.is_cluster() {
            self.outbox.asked[shard.0].notify_one();
        }
    }

    /// Refuses a write on `shard` while its outbox is full.
    pub(crate) fn outbox_open(&self, shard: Shard) -> AppResult<()> {
        match self.outbox.held[shard.0].load(Ordering::Relaxed) >= self.outbox_limit {
            true => Err(AppError::Backlogged {
                retry_after_secs: PASS_EVERY.as_secs(),
            }),
            false => Ok(()),
        }
    }

    /// The entries each shard's outbox held when this instance last
    /// drained it; None but in the cluster layout.
    pub fn outbox_entries(&self) -> Option<Vec<u64>> {
        let held = self.outbox.held.iter().map(|n| n.load(Ordering::Relaxed));
        self.layout.is_cluster().then(|| held.collect())
    }

    /// Drains each shard's outbox when a write asks and every second, for
    /// as long as the handle lives (the cluster layout only).
    pub fn start_outbox(&self) -> Option<AbortOnDropHandle<()>> {
        if !self.layout.is_cluster() {
            return None;
        }
        let store = self.clone();
        Some(AbortOnDropHandle::new(tokio::spawn(async move {
            join_all(store.layout.shards().map(|s| store.keep_draining(s))).await;
        })))
    }

    async fn keep_draining(&self, shard: Shard) {
        let asked = &self.outbox.asked[shard.0];
        loop {
            // The periodic pass applies what a killed server left behind.
            let _ = tokio::time::timeout(PASS_EVERY, asked.notified()).await;
            // A burst of writes' entries gather, to be applied together.
            tokio::time::sleep(GATHER).await;
            if let Err(e) = self.drain(shard).await {
                tracing::warn!(shard = shard.0, error = %e, "applying the outbox failed; retried later");
            }
        }
    }

    async fn drain(&self, shard: Shard) -> AppResult<()> {
        let outbox = self.layout.on(shard, keys::OUTBOX);
        let counted = &self.outbox.held[shard.0];
        loop {
            let mut conn = self.conn().await?;
            let (held, reply): (u64, StreamRangeReply) = redis::pipe()
                .cmd("XLEN")
                .arg(&outbox)
                .cmd("XRANGE")
                .arg(&outbox)
                .arg("-")
                .arg("+")
                .arg("COUNT")
                .arg(STEP)
                .query_async(&mut conn)
                .await?;
            counted.store(held, Ordering::Relaxed);
            let entries: Vec<Entry> = reply.ids.iter().filter_map(Entry::read).collect();
            if reply.ids.is_empty() {
                return Ok(());
            }
            let mut by_target: Vec<(Shard, Vec<&Entry>)> = Vec::new();
            for entry in &entries {
                let target = match entry.kind {
                    "group" => self.layout.of_group(&entry.whose),
                    _ => self.layout.of_user(&member_name(&entry.whose)),
                };
                match by_target.iter_mut().find(|(s, _)| *s == target) {
                    Some((_, list)) => list.push(entry),
                    None => by_target.push((target, vec![entry])),
                }
            }
            let applied = by_target.iter().map(|(target, list)| {
                let at = self.layout.at(*target);
                async move {
                    let mut conn = self.conn().await?;
                    scripts::apply_outbox(&mut conn, at, shard, list).await
                }
            });
            for result in join_all(applied).await {
                match result {
                    // Applied on its primary, which has no replica to wait
                    // for now (one lost, or lagging): holding the entries
                    // back would stop every later one behind them.
                    Ok(_) | Err(AppError::NotReplicated { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            let ids: Vec<&str> = reply.ids.iter().map(|e| e.id.as_str()).collect();
            let _: u64 = redis::cmd("XDEL")
                .arg(&outbox)
                .arg(&ids)
                .query_async(&mut conn)
                .await?;
            if ids.len() < STEP {
                counted.store(held.saturating_sub(ids.len() as u64), Ordering::Relaxed);
                return Ok(());
            }
        }
    }
}

/// The name of a `user:<name>` member.
fn member_name(member: &str) -> UserName {
    let name = member.strip_prefix(keys::USER_PREFIX).unwrap_or(member);
    UserName::from_stored(name.to_owned())
}

impl Entry {
    /// An entry as the scripts write it; None for one they do not (it is
    /// deleted unapplied).
    fn read(entry: &StreamId) -> Option<Self> {
        let (kind, whose) = [("karma", "member"), ("vote", "voter"), ("group", "group")]
            .into_iter()
            .find_map(|(kind, field)| Some((kind, entry.get(field)?)))?;
        Some(Entry {
            id: entry.id.clone(),
            kind,
            whose,
            article: entry.get("article").unwrap_or_default(),
            delta: entry.get("delta").or_else(|| entry.get("vote"))?,
            at: entry.get("at").unwrap_or_default(),
        })
    }
}
