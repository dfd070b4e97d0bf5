//! What a keyspace records about itself, read before anything else runs.
//!
//! A cluster keyspace fixes its count of shards when it is made: every key
//! and id names its shard, so another count would misplace them all. The
//! count lives in the `keyspace` hash. A cluster keyspace made before the
//! count was kept there has six shards; the marker every shard gets at the
//! first start shows it.

use std::time::Duration;

use super::keys::{self, Layout, Shard, DEFAULT_SHARDS, UNRECORDED_SHARDS};
use super::Store;
use crate::error::AppResult;

/// How long a starting server waits for a cluster to answer before it
/// gives up: it can serve nothing without the count.
const ANSWER_WITHIN: Duration = Duration::from_secs(60);

/// Why a keyspace can't be served as configured.
#[derive(Debug, thiserror::Error)]
pub enum KeyspaceRefused {
    #[error(
        "this cluster keyspace has {recorded} shards, fixed when it was made; \
         --cluster-shards (VOTEGRAPH_CLUSTER_SHARDS) {requested} would misplace its keys. \
         Leave the setting out, or set it to {recorded}"
    )]
    ShardsChanged { recorded: u16, requested: u16 },
    #[error("the keyspace records {0} shards, which no layout has (1 to {max})", max = keys::MAX_SHARDS)]
    BadCount(u16),
    #[error("the cluster did not answer within {}s: {cause}", ANSWER_WITHIN.as_secs())]
    Unreachable { cause: String },
}

impl Store {
    /// The store with the keyspace's own layout: on a cluster, the count
    /// of shards it records, or `requested` (default 12) for a new one.
    pub async fn open_keyspace(self, requested: Option<u16>) -> Result<Self, KeyspaceRefused> {
        if !self.layout.is_cluster() {
            return Ok(self);
        }
        let started = tokio::time::Instant::now();
        let recorded = loop {
            match self.shard_count(requested).await {
                Ok(count) => break count,
                Err(e) if started.elapsed() >= ANSWER_WITHIN => {
                    return Err(KeyspaceRefused::Unreachable {
                        cause: e.to_string(),
                    })
                }
                Err(e) => {
                    tracing::warn!(error = %e, "waiting for the cluster to read its shard count");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        };
        match requested {
            _ if !(1..=keys::MAX_SHARDS).contains(&recorded) => {
                Err(KeyspaceRefused::BadCount(recorded))
            }
            Some(requested) if requested != recorded => Err(KeyspaceRefused::ShardsChanged {
                recorded,
                requested,
            }),
            _ => Ok(self.with_layout(Layout::cluster(recorded))),
        }
    }

    /// The recorded count; a keyspace that records none gets one now.
    async fn shard_count(&self, requested: Option<u16>) -> AppResult<u16> {
        let mut conn = self.conn().await?;
        let mut read = redis::cmd("HGET");
        read.arg(keys::KEYSPACE).arg(keys::KEYSPACE_SHARDS);
        if let Some(count) = read.query_async::<Option<u16>>(&mut conn).await? {
            return Ok(count);
        }
        let count = match self.made_with_six_shards().await? {
            true => UNRECORDED_SHARDS,
            false => requested.unwrap_or(DEFAULT_SHARDS),
        };
        // Of instances starting at once, the first to record wins.
        let _: bool = redis::cmd("HSETNX")
            .arg(keys::KEYSPACE)
            .arg(keys::KEYSPACE_SHARDS)
            .arg(count)
            .query_async(&mut conn)
            .await?;
        let recorded: Option<u16> = read.query_async(&mut conn).await?;
        Ok(recorded.unwrap_or(count))
    }

    /// Whether the first start of a six-shard keyspace left its marker.
    async fn made_with_six_shards(&self) -> AppResult<bool> {
        let six = Layout::cluster(UNRECORDED_SHARDS);
        let marker = six.on(Shard(0), keys::NAMES_INDEX_BUILT);
        let mut conn = self.conn().await?;
        Ok(redis::cmd("EXISTS")
            .arg(marker)
            .query_async::<bool>(&mut conn)
            .await?)
    }
}
