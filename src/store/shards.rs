//! Commands spread over the shards of the cluster layout (see
//! `keys::Layout`): one pipeline per shard, the shards' sent in
//! parallel, replies in the order asked. On one primary there is one
//! shard, and this is one pipeline.

use std::cmp::Ordering;
use std::future::Future;
use std::time::Duration;

use futures_util::future::{join_all, try_join_all};
use redis::{Cmd, Value};

use super::keys::{self, Shard};
use super::Store;
use crate::domain::UserName;
use crate::error::{AppError, AppResult};
use crate::rate::RateLimit;
use crate::rate::{RateAction, RateScope};

/// A rate limit as a script is given it: its counter and limit, or a
/// count of 0 when the call was counted already (see [`Store::gate`]).
#[derive(Debug, Clone)]
pub struct Gate {
    pub key: String,
    pub count: u32,
    pub window_secs: u32,
}

impl Store {
    /// Sends each command to its shard, in one round trip.
    pub(crate) async fn scatter(&self, commands: Vec<(Shard, Cmd)>) -> AppResult<Vec<Value>> {
        let mut by_shard: Vec<(Shard, redis::Pipeline, Vec<usize>)> = Vec::new();
        for (i, (shard, cmd)) in commands.into_iter().enumerate() {
            let at = match by_shard.iter().position(|(s, ..)| *s == shard) {
                Some(at) => at,
                None => {
                    by_shard.push((shard, redis::pipe(), Vec::new()));
                    by_shard.len() - 1
                }
            };
            by_shard[at].1.add_command(cmd);
            by_shard[at].2.push(i);
        }
        let sent = by_shard.iter().map(|(_, pipe, _)| async move {
            let mut conn = self.conn().await?;
            let replies: Vec<Value> = pipe.query_async(&mut conn).await?;
            AppResult::Ok(replies)
        });
        let replies = try_join_all(sent).await?;
        let total = by_shard.iter().map(|(_, _, at)| at.len()).sum();
        let mut out = vec![Value::Nil; total];
        for ((_, _, at), replies) in by_shard.iter().zip(replies) {
            if replies.len() != at.len() {
                return Err(AppError::Internal("a shard's pipeline lost replies".into()));
            }
            for (&i, reply) in at.iter().zip(replies) {
                out[i] = reply;
            }
        }
        Ok(out)
    }

    /// `command` on `key`'s slice on every shard, in one round trip.
    pub(crate) async fn each_shard(
        &self,
        key: &str,
        command: impl Fn(String) -> Cmd,
    ) -> AppResult<Vec<Value>> {
        let layout = self.layout;
        let commands = layout.shards().map(|s| (s, command(layout.on(s, key))));
        self.scatter(commands.collect()).await
    }

    /// The sum of [`Store::each_shard`]'s numeric replies.
    pub(crate) async fn sum_shards(&self, key: &str, command: &str) -> AppResult<u64> {
        let counts = self.each_shard(key, |key| {
            let mut count = redis::cmd(command);
            count.arg(key);
            count
        });
        Ok(counts
            .await?
            .iter()
            .filter_map(super::value_f64)
            .sum::<f64>() as u64)
    }

    /// How many shards' primaries answer a read within `wait`, of how
    /// many shards (one on one primary).
    pub async fn shards_answering(&self, wait: Duration) -> (usize, usize) {
        let layout = self.layout;
        let probe = |shard| async move {
            let mut conn = self.conn().await?;
            let mut exists = redis::cmd("EXISTS");
            exists.arg(layout.on(shard, keys::SCORE));
            AppResult::Ok(exists.query_async::<u64>(&mut conn).await?)
        };
        let probes = layout
            .shards()
            .map(|s| tokio::time::timeout(wait, probe(s)));
        let answers = join_all(probes).await;
        let answering = answers.iter().filter(|a| matches!(a, Ok(Ok(_)))).count();
        (answering, answers.len())
    }

    /// A rate limit for a script that runs on `shard`: counted by the
    /// script when its counter (`counter`, on `counter_shard`) is there
    /// too, as on one primary; else counted now, in its own step, and the
    /// script counts nothing. RATE_LIMITED for `action` in `scope` when
    /// the limit refuses.
    pub(crate) async fn gate(
        &self,
        (counter_shard, counter): (Shard, String),
        shard: Shard,
        limit: RateLimit,
        (action, scope): (RateAction, RateScope),
    ) -> AppResult<Gate> {
        let layout = self.layout;
        if counter_shard == shard {
            return Ok(Gate {
                key: layout.on(counter_shard, counter),
                count: limit.count(),
                window_secs: limit.window_secs(),
            });
        }
        let key = layout.on(counter_shard, &counter);
        let mut conn = self.conn().await?;
        let wait = super::scripts::count_rate(&mut conn, key, limit).await?;
        if wait > 0 {
            return Err(AppError::rate_limited(action, scope, wait));
        }
        Ok(Gate {
            key: layout.on(shard, counter),
            count: 0,
            window_secs: limit.window_secs(),
        })
    }
}

impl Store {
    /// [`Store::gate`] for a user's own limit of `action`, a write on
    /// `shard`, which waits while the shard's outbox is full.
    pub(crate) async fn user_gate(
        &self,
        user: &UserName,
        action: RateAction,
        shard: Shard,
        limit: RateLimit,
    ) -> AppResult<Gate> {
        self.outbox_open(shard)?;
        let counter = (
            self.layout.of_user(user),
            keys::user_rate(user.as_str(), action),
        );
        self.gate(counter, shard, limit, (action, RateScope::User))
            .await
    }
}

/// A shard's first entries of a ranking (member, value), and a count it
/// gives with them.
pub(crate) type ShardPage = (Vec<(String, f64)>, u64);

impl Store {
    /// Entries `skip..skip + take` of a ranking split over the shards, best
    /// first, as one sorted set would list them, and the sum of the shards'
    /// counts. `read(shard, from, count)` reads `count` entries of a
    /// shard's slice from rank `from`: on one primary, the page itself. On
    /// a cluster each slice is read from its top, first for a share of the
    /// page, and again for all of it only where that share ran out within
    /// the page: the articles are spread evenly over the shards.
    pub(crate) async fn merged_ranking<F, Fut>(
        &self,
        (skip, take): (usize, usize),
        read: F,
    ) -> AppResult<ShardPage>
    where
        F: Fn(Shard, usize, usize) -> Fut,
        Fut: Future<Output = AppResult<ShardPage>>,
    {
        if take == 0 {
            return Ok((Vec::new(), 0));
        }
        if !self.layout.is_cluster() {
            return read(Shard(0), skip, take).await;
        }
        let shards: Vec<Shard> = self.layout.shards().collect();
        let need = skip + take;
        let share = need.min(need.div_ceil(shards.len()) * 2 + 2);
        let mut pages = try_join_all(shards.iter().map(|&s| read(s, 0, share))).await?;
        let merged = merge(&pages);
        let cutoff = merged.get(need - 1);
        let ran_out: Vec<usize> = (0..pages.len())
            .filter(|&i| share < need && pages[i].0.len() == share)
            .filter(|&i| {
                let last = pages[i].0.last();
                last.zip(cutoff)
                    .is_none_or(|(last, cut)| by_rank(last, cut).is_le())
            })
            .collect();
        let merged = if ran_out.is_empty() {
            merged
        } else {
            let again = try_join_all(ran_out.iter().map(|&i| read(shards[i], 0, need))).await?;
            for (i, page) in ran_out.into_iter().zip(again) {
                pages[i] = page;
            }
            merge(&pages)
        };
        let count = pages.iter().map(|p| p.1).sum();
        Ok((merged.into_iter().skip(skip).take(take).collect(), count))
    }
}

/// Every page's entries in one order.
fn merge(pages: &[ShardPage]) -> Vec<(String, f64)> {
    let mut all: Vec<(String, f64)> = pages.iter().flat_map(|p| p.0.iter().cloned()).collect();
    all.sort_by(by_rank);
    all
}

/// `ZREVRANGE`'s order of one sorted set: by value, highest first, ties
/// by member, last first. Members are compared without their shard's tag,
/// as one set holds them.
fn by_rank(a: &(String, f64), b: &(String, f64)) -> Ordering {
    let untagged = |m: &str| -> usize {
        m.strip_prefix('{')
            .and_then(|r| r.find('}'))
            .map_or(0, |at| at + 2)
    };
    let (a_key, b_key) = (&a.0[untagged(&a.0)..], &b.0[untagged(&b.0)..]);
    b.1.total_cmp(&a.1).then_with(|| b_key.cmp(a_key))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering as Atomic};
    use std::time::Duration;

    use super::*;
    use crate::store::locator::Locator;

    /// A cluster-layout store that never dials: only `read` is asked.
    fn cluster_store() -> Store {
        let timeout = Duration::from_secs(1);
        let locator = Locator::cluster("127.0.0.1:1", timeout, timeout).unwrap();
        Store::new(locator, 1, timeout, timeout, None).unwrap()
    }

    #[tokio::test]
    async fn a_shard_holding_the_whole_page_is_read_again_for_it() {
        // Shard 0 holds the 30 best entries, each other shard 5 worse ones
        // (tied across shards), and shard 1 one that ties with shard 0's.
        let store = cluster_store();
        let mut slices = vec![Vec::new(); store.layout().shard_count()];
        for i in 0..30 {
            slices[0].push((format!("{{s0}}a{i:02}"), 100.0 - i as f64));
        }
        for (shard, slice) in slices.iter_mut().enumerate().skip(1) {
            for i in 0..5 {
                slice.push((format!("{{s{shard}}}b{i}"), 10.0 - i as f64));
            }
        }
        slices[1].push(("{s1}a99".to_owned(), 71.0));
        for slice in &mut slices {
            slice.sort_by(by_rank);
        }
        let mut one_set: Vec<(String, f64)> = slices.concat();
        one_set.sort_by(by_rank);

        let reads = AtomicUsize::new(0);
        let read = |shard: Shard, from: usize, count: usize| {
            reads.fetch_add(1, Atomic::SeqCst);
            let slice = &slices[shard.0];
            let page = slice.iter().skip(from).take(count).cloned().collect();
            std::future::ready(Ok((page, slice.len() as u64)))
        };
        let (page, count) = store.merged_ranking((20, 12), read).await.unwrap();
        assert_eq!(page, one_set[20..32].to_vec());
        assert_eq!(count, one_set.len() as u64, "each slice's count, once");
        assert_eq!(
            reads.load(Atomic::SeqCst),
            store.layout().shard_count() + 1,
            "shard 0 again"
        );
    }
}
