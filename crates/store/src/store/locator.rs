//! Where the Redis primary is: one address (`REDIS_URL`), whatever
//! Redis Sentinel names as the primary of a master name
//! (`REDIS_SENTINELS`, `REDIS_MASTER_NAME`), or a Redis Cluster
//! (`REDIS_CLUSTER_NODES`), whose primaries redis-rs follows itself.
//!
//! Every new connection asks again: the pool's (a connection that meets a
//! demoted or dead primary is marked broken and dialled anew) and the
//! pub/sub listener's. So after a failover the pool, the scripts (loaded
//! again on `NOSCRIPT` by redis-rs) and pub/sub move to the new primary by
//! themselves. A node Sentinel names is checked with `ROLE` before it is
//! used: during a failover Sentinel may still name the old primary, and
//! writing to a node that came back as a replica fails with `READONLY`.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, ConnectionInfo, ErrorKind, RedisError, RedisResult, Value};

use super::connection_info;
use crate::error::{AppError, AppResult};

/// How to reach the primary; cheap to clone.
#[derive(Clone)]
pub struct Locator(Arc<Target>);

enum Target {
    Url(ConnectionInfo),
    Cluster {
        seeds: Vec<ConnectionInfo>,
        client: Box<ClusterClient>,
    },
    Sentinel {
        sentinels: Vec<ConnectionInfo>,
        master: String,
        /// Bounds each question to a sentinel and each `ROLE` check.
        timeout: Duration,
    },
}

impl Locator {
    /// A fixed address.
    pub fn url(redis_url: &str) -> AppResult<Self> {
        Ok(Self(Arc::new(Target::Url(connection_info(redis_url)?))))
    }

    /// The primary Sentinel names for `master`, asking `sentinels`
    /// (`host:port`, comma-separated) in turn.
    pub fn sentinel(sentinels: &str, master: &str, timeout: Duration) -> AppResult<Self> {
        let sentinels = addresses(sentinels, "REDIS_SENTINELS names no sentinel")?;
        if master.is_empty() {
            return Err(AppError::BadRequest(
                "REDIS_MASTER_NAME is empty".to_owned(),
            ));
        }
        Ok(Self(Arc::new(Target::Sentinel {
            sentinels,
            master: master.to_owned(),
            timeout,
        })))
    }

    /// A Redis Cluster, found through `seeds` (`host:port`, comma-separated),
    /// dialling each node within `dial` and waiting `reply` for an answer.
    /// Slots, `MOVED`, `ASK` and failovers are redis-rs' job from there.
    pub fn cluster(seeds: &str, dial: Duration, reply: Duration) -> AppResult<Self> {
        let seeds = addresses(seeds, "REDIS_CLUSTER_NODES names no node")?;
        let client = ClusterClient::builder(seeds.clone())
            .connection_timeout(dial)
            .response_timeout(reply)
            .build()
            .map_err(AppError::Storage)?;
        let client = Box::new(client);
        Ok(Self(Arc::new(Target::Cluster { seeds, client })))
    }

    /// Whether keys must be laid out for Redis Cluster (see `keys.rs`).
    pub fn is_cluster(&self) -> bool {
        matches!(&*self.0, Target::Cluster { .. })
    }

    /// A new connection to the primary, or to the whole cluster.
    pub async fn connect(&self, config: &AsyncConnectionConfig) -> RedisResult<Link> {
        match &*self.0 {
            Target::Cluster { client, .. } => client
                .get_async_connection_with_config(ClusterConfig::new())
                .await
                .map(Link::Cluster),
            _ => self
                .client()
                .await?
                .get_multiplexed_async_connection_with_config(config)
                .await
                .map(Link::Single),
        }
    }

    /// Where connections go, for logs and `/health` (no credentials).
    pub(crate) fn describe(&self) -> String {
        match &*self.0 {
            Target::Url(info) => info.addr().to_string(),
            Target::Sentinel { master, .. } => format!("sentinel master {master}"),
            Target::Cluster { seeds, .. } => {
                let seeds: Vec<String> = seeds.iter().map(|s| s.addr().to_string()).collect();
                format!("cluster {}", seeds.join(","))
            }
        }
    }

    /// An address of the deployment (the primary's, or a sentinel's), for
    /// what needs one without dialling it.
    pub(crate) fn any_address(&self) -> ConnectionInfo {
        match &*self.0 {
            Target::Url(info) => info.clone(),
            Target::Sentinel { sentinels, .. } => sentinels[0].clone(),
            Target::Cluster { seeds, .. } => seeds[0].clone(),
        }
    }

    /// A client for the primary as it is now; in a cluster, for the first
    /// seed that answers (pub/sub reaches every node from any of them).
    pub async fn client(&self) -> RedisResult<redis::Client> {
        match &*self.0 {
            Target::Url(info) => redis::Client::open(info.clone()),
            Target::Cluster { seeds, .. } => first_answering(seeds).await,
            Target::Sentinel {
                sentinels,
                master,
                timeout,
            } => {
                let mut last = None;
                for sentinel in sentinels {
                    match primary_from(sentinel, master, *timeout).await {
                        Ok(client) => return Ok(client),
                        Err(e) => last = Some(e),
                    }
                }
                Err(last
                    .unwrap_or_else(|| RedisError::from((ErrorKind::Io, "no sentinel answered"))))
            }
        }
    }
}

/// `host:port` addresses, comma-separated; `none` when there are none.
fn addresses(list: &str, none: &str) -> AppResult<Vec<ConnectionInfo>> {
    let found: Vec<ConnectionInfo> = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| connection_info(&format!("redis://{s}")))
        .collect::<AppResult<_>>()?;
    match found.is_empty() {
        true => Err(AppError::BadRequest(none.to_owned())),
        false => Ok(found),
    }
}

/// One connection: to a single Redis, or to a cluster's every node.
#[derive(Clone)]
pub enum Link {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

async fn first_answering(seeds: &[ConnectionInfo]) -> RedisResult<redis::Client> {
    let mut last = None;
    for seed in seeds {
        let client = redis::Client::open(seed.clone())?;
        let answered = async {
            let mut conn = client.get_multiplexed_async_connection().await?;
            redis::cmd("PING").query_async::<String>(&mut conn).await
        };
        match answered.await {
            Ok(_) => return Ok(client),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| RedisError::from((ErrorKind::Io, "no cluster node answered"))))
}

/// Asks one sentinel for the primary of `master`, and checks that node is
/// a primary now.
async fn primary_from(
    sentinel: &ConnectionInfo,
    master: &str,
    timeout: Duration,
) -> RedisResult<redis::Client> {
    let within = |what: &'static str| RedisError::from((ErrorKind::Io, what));
    let ask = async {
        let mut conn = redis::Client::open(sentinel.clone())?
            .get_multiplexed_async_connection()
            .await?;
        let (host, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(master)
            .query_async(&mut conn)
            .await?;
        let info = connection_info(&format!("redis://{host}:{port}"))
            .map_err(|_| within("sentinel named an invalid address"))?;
        let client = redis::Client::open(info)?;
        let mut node = client.get_multiplexed_async_connection().await?;
        let role: Vec<Value> = redis::cmd("ROLE").query_async(&mut node).await?;
        match role.first() {
            Some(Value::BulkString(r)) if r.as_slice() == b"master" => Ok(client),
            Some(Value::SimpleString(r)) if r == "master" => Ok(client),
            _ => Err(within("the node sentinel named is not a primary (yet)")),
        }
    };
    tokio::time::timeout(timeout, ask)
        .await
        .unwrap_or_else(|_| Err(within("sentinel did not answer in time")))
}
