//! Commands spread over the shards of the cluster layout (see
//! `keys::Layout`): one pipeline per shard, the shards' sent in
//! parallel, replies in the order asked. On one primary there is one
//! shard, and this is one pipeline.

use futures_util::future::try_join_all;
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
    /// [`Store::gate`] for a user's own limit of `action`.
    pub(crate) async fn user_gate(
        &self,
        user: &UserName,
        action: RateAction,
        shard: Shard,
        limit: RateLimit,
    ) -> AppResult<Gate> {
        let counter = (
            self.layout.of_user(user),
            keys::user_rate(user.as_str(), action),
        );
        self.gate(counter, shard, limit, (action, RateScope::User))
            .await
    }
}

/// The ranking pages of every shard merged into the page `start..=stop`
/// of the whole: by value, highest first, ties by member, last first, as
/// `ZREVRANGE` orders one sorted set.
pub fn merge_ranked(
    pages: Vec<Vec<(String, f64)>>,
    start: usize,
    stop: usize,
) -> Vec<(String, f64)> {
    // Members are compared without their shard's tag: as one set holds them.
    let untagged = |m: &str| -> usize {
        m.strip_prefix('{')
            .and_then(|r| r.find('}'))
            .map_or(0, |at| at + 2)
    };
    if pages.len() == 1 {
        // One sorted set's page is in order already.
        let take = (stop + 1).saturating_sub(start);
        return pages.into_iter().flatten().skip(start).take(take).collect();
    }
    let mut all: Vec<(String, f64)> = pages.into_iter().flatten().collect();
    all.sort_by(|a, b| {
        let (a_key, b_key) = (&a.0[untagged(&a.0)..], &b.0[untagged(&b.0)..]);
        b.1.total_cmp(&a.1).then_with(|| b_key.cmp(a_key))
    });
    all.into_iter()
        .skip(start)
        .take((stop + 1).saturating_sub(start))
        .collect()
}
