//! All Redis access: the connection pool, the keyspace, the Lua scripts and
//! the reads and writes the GraphQL layer calls.
//!
//! Resolvers never build Redis commands themselves; they call the methods of
//! [`Store`], which keep the book-compatible keyspace consistent.

mod articles;
mod deriver;
mod documents;
mod feeds;
mod groups;
pub mod keys;
mod keyspace;
mod locator;
mod moderation;
mod nodes;
mod outbox;
mod scripts;
mod shard_tags;
mod shards;
mod users;
mod votes;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
use redis::io::tcp::{socket2::TcpKeepalive, TcpSettings};
use redis::AsyncConnectionConfig;
use redis::{Cmd, ConnectionInfo, IntoConnectionInfo, Pipeline, RedisFuture, Value};

pub use articles::{not_found, ArticleRecord, Ranked, Viewer, ARTICLE_FIELDS};
pub use deriver::DeriverStats;
pub use feeds::{Cursor, List, Order};
pub use groups::{DirectoryPage, GroupCursor};
pub use locator::{Link, Locator};
pub use moderation::{no_user, Account, ModerationLimits, Page};
pub use scripts::RegisterLimits;
pub use scripts::{Actor, ModLogFilter, ModLogRecord, UserAction};
pub use users::{Caller, LoginLimit, SessionUser, Standing};

use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

use crate::error::{AppError, AppResult};
use crate::metrics::MetricsBuilder;

/// A pooled multiplexed connection that remembers when it broke.
///
/// bb8-redis never reports a multiplexed connection as broken, so a pool
/// would keep handing out a dead socket after Redis restarts. Marking the
/// connection on I/O errors lets bb8 drop it and dial a new one, without a
/// PING on every checkout. The flag is shared by clones, because requests
/// run on clones (see [`Store::conn`]). Every command passes through here,
/// so this is also where Redis latency and errors are measured.
#[derive(Clone)]
pub(crate) struct Conn {
    inner: Link,
    broken: Arc<AtomicBool>,
    shared: Arc<Shared>,
}

/// What every connection of a store shares.
pub struct Shared {
    address: Arc<str>,
    metrics: RedisMetrics,
    /// `--wait-replicas`: writes answer once this many replicas have them
    /// (`WAIT`, in the write's own pipeline), or fail after the timeout.
    wait: Option<(u32, Duration)>,
}

/// Bucket bounds of Redis command latencies, in microseconds: from a
/// command on the unix socket to the default command timeout.
const REDIS_BOUNDS_US: &[u64] = &[
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

fn redis_histogram() -> Histogram {
    Histogram::new(crate::metrics::buckets(REDIS_BOUNDS_US))
}

/// Redis command latencies and failures, as `/metrics` shows them. The
/// series are made once, so recording one is no label lookup.
pub struct RedisMetrics {
    durations: Family<KindLabel, Histogram, fn() -> Histogram>,
    errors: Family<KindLabel, Counter>,
    commands: Histogram,
    pipelines: Histogram,
    /// By [`RedisMetrics::ERROR_KINDS`].
    failures: [Counter; 4],
}

impl Default for RedisMetrics {
    fn default() -> Self {
        let durations: Family<KindLabel, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(redis_histogram);
        let errors = Family::<KindLabel, Counter>::default();
        let series = |kind| durations.get_or_create(&KindLabel { kind }).clone();
        let (commands, pipelines) = (series("command"), series("pipeline"));
        let failures =
            Self::ERROR_KINDS.map(|kind| errors.get_or_create(&KindLabel { kind }).clone());
        Self {
            durations,
            errors,
            commands,
            pipelines,
            failures,
        }
    }
}

impl RedisMetrics {
    /// A broken or refused connection, a reply past the command timeout,
    /// an error reply from Redis (a script error, NOSCRIPT), anything else.
    pub(crate) const ERROR_KINDS: [&'static str; 4] = ["connection", "timeout", "reply", "other"];

    pub fn register(&self, metrics: &mut MetricsBuilder) {
        metrics.register(
            "votegraph_redis_command_duration_seconds",
            "Time from sending a Redis command (or a pipeline, as one) to its reply.",
            self.durations.clone(),
        );
        metrics.register(
            "votegraph_redis_errors",
            "Failed Redis commands: connection (broken or refused), timeout, reply (an error reply from Redis), other.",
            self.errors.clone(),
        );
    }

    fn error(&self, kind: usize) {
        self.failures[kind].inc();
    }
}

impl Conn {
    pub(crate) fn wait(&self) -> Option<(u32, Duration)> {
        self.shared.wait
    }

    fn is_cluster(&self) -> bool {
        matches!(self.inner, Link::Cluster(_))
    }

    /// Sends `pipeline` to the primary serving `slot`, whatever slots its
    /// commands' keys are in: Redis runs a single-key command of any slot
    /// it serves, where redis-rs routes a pipeline only when its keys
    /// share one slot. On one primary, as any pipeline. Error replies stay
    /// among the replies.
    pub(crate) async fn pipeline_to(
        &mut self,
        pipeline: &Pipeline,
        slot: u16,
    ) -> redis::RedisResult<Vec<Value>> {
        let started = Instant::now();
        let count = pipeline.len();
        let r = match &mut self.inner {
            Link::Cluster(c) => {
                let node = SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master));
                c.route_pipeline(pipeline.clone(), 0, count, node).await
            }
            single => single.req_packed_commands(pipeline, 0, count).await,
        };
        self.pipelined(started, &r);
        r
    }

    /// Records a pipeline's latency, and its failure if it failed.
    fn pipelined<T>(&self, started: Instant, result: &redis::RedisResult<T>) {
        self.shared
            .metrics
            .pipelines
            .observe(started.elapsed().as_secs_f64());
        self.note(result);
    }

    fn note<T>(&self, result: &redis::RedisResult<T>) {
        let Err(e) = result else { return };
        let address = &self.shared.address;
        let metrics = &self.shared.metrics;
        // A demoted primary (after a failover) or one still loading its
        // data: dial again, through the locator, to the primary of now.
        let demoted = matches!(e.code(), Some("READONLY" | "MASTERDOWN" | "LOADING"));
        if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() || demoted {
            metrics.error(0);
            // A cluster link repairs each node's connection itself: one
            // node's failure must not take every shard's link down.
            if !self.is_cluster() && !self.broken.swap(true, Ordering::Relaxed) {
                // Once per connection: a storm of failing requests on
                // one broken socket must not flood the log.
                tracing::warn!(redis = %address, error = %e, "redis connection broken");
            }
        } else if e.is_timeout() {
            metrics.error(1);
            tracing::warn!(redis = %address, error = %e, "redis command timed out");
        } else if e.code().is_some() {
            metrics.error(2);
        } else {
            metrics.error(3);
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let started = Instant::now();
            let r = self.inner.req_packed_command(cmd).await;
            self.shared
                .metrics
                .commands
                .observe(started.elapsed().as_secs_f64());
            self.note(&r);
            r
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let started = Instant::now();
            let r = self
                .inner
                .req_packed_commands(pipeline, offset, count)
                .await;
            self.pipelined(started, &r);
            r
        })
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Link::Single(c) => c.req_packed_command(cmd),
            Link::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Link::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Link::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Link::Single(c) => c.get_db(),
            Link::Cluster(c) => c.get_db(),
        }
    }
}

/// bb8 manager dialling through the locator with votegraph's timeouts,
/// noting broken connections and why the last dial failed.
pub(crate) struct Manager {
    locator: Locator,
    config: AsyncConnectionConfig,
    /// bb8 dials in the background and a waiting request only learns that
    /// no connection came in time; the dial's own error is kept here so the
    /// log can say "connection refused" rather than "timed out".
    last_error: Arc<Mutex<Option<String>>>,
    shared: Arc<Shared>,
}

impl bb8::ManageConnection for Manager {
    type Connection = Conn;
    type Error = redis::RedisError;

    async fn connect(&self) -> Result<Conn, redis::RedisError> {
        match self.locator.connect(&self.config).await {
            Ok(inner) => Ok(Conn {
                inner,
                broken: Arc::new(AtomicBool::new(false)),
                shared: self.shared.clone(),
            }),
            Err(e) => {
                self.shared.metrics.error(0);
                tracing::warn!(redis = %self.shared.address, error = %e, "cannot connect to redis");
                *self.last_error.lock() = Some(e.to_string());
                Err(e)
            }
        }
    }

    async fn is_valid(&self, conn: &mut Conn) -> Result<(), redis::RedisError> {
        redis::cmd("PING").query_async(&mut conn.inner).await
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.broken.load(Ordering::Relaxed)
    }
}

pub(crate) type Pool = bb8::Pool<Manager>;

pub const DEFAULT_GROUP_SCAN_BUDGET: u32 = 5_000;

/// Handle to the Redis database; cheap to clone.
#[derive(Clone)]
pub struct Store {
    pool: Pool,
    /// Where Redis is (host:port or socket path; never the password).
    address: Arc<str>,
    /// Why the last dial failed, for a checkout that timed out.
    last_error: Arc<Mutex<Option<String>>>,
    shared: Arc<Shared>,
    pool_size: u32,
    /// Membership checks a cold group page may spend before the group's
    /// ranking is built with ZINTERSTORE instead (see the group-page script).
    group_scan_budget: u32,
    /// The flag threshold and the log's bound.
    moderation: ModerationLimits,
    /// Held while the folded-name index is built (see
    /// [`Store::build_name_index`]).
    name_index: Arc<tokio::sync::Mutex<()>>,
    locator: Locator,
    derive: Arc<deriver::DeriveQueue>,
    /// The book's keyspace, or the cluster's (see [`keys::Layout`]).
    layout: keys::Layout,
    /// Each shard's outbox, as this instance knows it (see `outbox.rs`).
    outbox: Arc<outbox::Outboxes>,
    /// The entries an outbox may hold before its shard's writes wait.
    outbox_limit: u64,
    /// Which primary serves each shard (the cluster layout).
    nodes: Arc<nodes::Nodes>,
}

impl Store {
    /// Builds the pool without dialling: the server starts even when Redis is
    /// down and serves as soon as it comes up.
    ///
    /// `command_timeout` bounds every command's wait for its reply (and a
    /// dial), so a paused or overloaded Redis fails requests in bounded time
    /// instead of holding them.
    pub fn new(
        locator: Locator,
        max_size: u32,
        timeout: Duration,
        command_timeout: Duration,
        wait: Option<(u32, Duration)>,
    ) -> AppResult<Self> {
        let address: Arc<str> = locator.describe().into();
        // A cluster's count is the keyspace's (see `Store::open_keyspace`).
        let layout = match locator.is_cluster() {
            true => keys::Layout::cluster(keys::DEFAULT_SHARDS),
            false => keys::Layout::Single,
        };
        let last_error = Arc::new(Mutex::new(None));
        let shared = Arc::new(Shared {
            address: address.clone(),
            metrics: RedisMetrics::default(),
            wait,
        });
        let manager = Manager {
            locator: locator.clone(),
            config: AsyncConnectionConfig::new()
                .set_response_timeout(Some(command_timeout))
                .set_connection_timeout(Some(command_timeout.min(timeout))),
            last_error: last_error.clone(),
            shared: shared.clone(),
        };
        let pool = bb8::Pool::builder()
            .max_size(max_size.max(1))
            .connection_timeout(timeout)
            // Checkout-time PINGs would double the round trips of every
            // request; broken connections are caught by `has_broken` instead.
            .test_on_check_out(false)
            .retry_connection(false)
            .build_unchecked(manager);
        Ok(Self {
            pool,
            address,
            last_error,
            shared,
            pool_size: max_size.max(1),
            group_scan_budget: DEFAULT_GROUP_SCAN_BUDGET,
            moderation: ModerationLimits::default(),
            name_index: Arc::default(),
            layout,
            locator,
            derive: Arc::default(),
            outbox: Arc::new(outbox::Outboxes::new(layout.shard_count())),
            outbox_limit: outbox::DEFAULT_LIMIT,
            nodes: Arc::default(),
        })
    }

    /// Asks the deriver to derive `touched` soon (see `deriver.rs`).
    fn derive_soon(&self, touched: keys::Touched) {
        self.derive.touch(touched);
    }

    /// How following other clients' writes goes (for `/health`).
    pub fn deriver_stats(&self) -> DeriverStats {
        self.derive.stats()
    }

    /// Uses `layout`'s shards, with an outbox each.
    fn with_layout(mut self, layout: keys::Layout) -> Self {
        self.outbox = Arc::new(outbox::Outboxes::new(layout.shard_count()));
        self.nodes = Arc::default();
        self.layout = layout;
        self
    }

    /// Sets the entries an outbox may hold (see `outbox.rs`).
    pub fn with_outbox_limit(mut self, entries: u64) -> Self {
        self.outbox_limit = entries;
        self
    }

    /// Sets the cold group page's scan budget (0: always build the ranking).
    pub fn with_group_scan_budget(mut self, budget: u32) -> Self {
        self.group_scan_budget = budget;
        self
    }

    /// A connection for one request. It is a clone of a pooled multiplexed
    /// connection, and the pool slot is given back at once: requests share
    /// the few pooled sockets concurrently instead of queueing for them.
    pub(crate) async fn conn(&self) -> AppResult<Conn> {
        match self.pool.get().await {
            Ok(conn) => Ok(conn.clone()),
            Err(bb8::RunError::User(e)) => Err(AppError::Storage(e)),
            Err(bb8::RunError::TimedOut) => Err(AppError::StorageTimeout {
                address: self.address.to_string(),
                cause: self
                    .last_error
                    .lock()
                    .clone()
                    .unwrap_or_else(|| "no pooled connection became free in time".to_owned()),
            }),
        }
    }

    pub fn layout(&self) -> keys::Layout {
        self.layout
    }

    /// Where Redis is, for logs and `/health` (no credentials).
    pub fn address(&self) -> &str {
        &self.address
    }

    pub fn redis_metrics(&self) -> &RedisMetrics {
        &self.shared.metrics
    }

    /// The pool's connections and checkout counts (no Redis call).
    pub fn pool_state(&self) -> bb8::State {
        self.pool.state()
    }

    pub fn pool_size(&self) -> u32 {
        self.pool_size
    }

    /// Whether a one-time index build left its marker (on every shard):
    /// then it need not run again.
    pub(crate) async fn has_marker(&self, marker: &str) -> AppResult<bool> {
        let found = self.sum_shards(marker, "EXISTS").await?;
        Ok(found == self.layout.shards().count() as u64)
    }

    /// Leaves a pass's marker on every shard: the Unix second it finished.
    pub(crate) async fn set_marker(&self, marker: &str) -> AppResult<()> {
        let set = self.on_each_shard(marker, |key| {
            let mut set = redis::cmd("SET");
            set.arg(key).arg(unix_secs());
            set
        });
        self.scatter_writes(set).await
    }

    /// `INFO replication`, as field → value.
    pub async fn replication(&self) -> AppResult<std::collections::HashMap<String, String>> {
        let mut conn = self.conn().await?;
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut conn)
            .await?;
        Ok(info
            .lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
            .collect())
    }

    /// Answers whether Redis replies to PING.
    pub async fn ping(&self) -> AppResult<()> {
        let mut conn = self.conn().await?;
        let _: String = redis::cmd("PING").query_async(&mut conn).await?;
        Ok(())
    }

    /// PINGs Redis and says why it failed (a refused dial, a wrong
    /// password, a timeout), for the log at startup: a wrong `REDIS_URL`
    /// is named before the first request fails.
    pub async fn check(&self) -> Result<(), String> {
        match self.ping().await {
            Ok(()) => Ok(()),
            Err(AppError::StorageTimeout { cause, .. }) => Err(cause),
            Err(AppError::Storage(e)) => Err(e.to_string()),
            Err(e) => Err(format!("{e:?}")),
        }
    }
}

/// How every votegraph connection dials Redis (the pool's and pub/sub's).
///
/// `TCP_NODELAY`, because a multiplexed connection writes small commands
/// while earlier ones are still unanswered, and Nagle's algorithm would hold
/// each of those back until the earlier reply brings an ACK: one more round
/// trip for concurrent requests on any real network (redis-rs leaves Nagle
/// on by default). Keep-alive probes, so that a Redis that vanished without a
/// reset (a dead host, a dropped NAT entry) breaks the connection within
/// about 25 seconds instead of leaving pub/sub silently deaf for hours.
/// Unix-socket URLs ignore both.
pub fn connection_info(redis_url: &str) -> AppResult<ConnectionInfo> {
    let info = redis_url
        .into_connection_info()
        .map_err(AppError::Storage)?;
    let keepalive = TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL)
        .with_retries(KEEPALIVE_RETRIES);
    Ok(info.set_tcp_settings(
        TcpSettings::default()
            .set_nodelay(true)
            .set_keepalive(keepalive),
    ))
}

/// Whole seconds since the Unix epoch, by this machine's clock (for
/// markers and the `TOP_*` periods' bounds; votes use Redis' clock).
pub(crate) fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
const KEEPALIVE_RETRIES: u32 = 3;

/// Reads `WITHSCORES` replies' (member, score) pairs.
pub(crate) fn scored_pairs(reply: &Value) -> Vec<(String, f64)> {
    let Value::Array(items) = reply else {
        return Vec::new();
    };
    items
        .chunks_exact(2)
        .filter_map(|pair| Some((value_str(&pair[0])?.to_owned(), value_f64(&pair[1])?)))
        .collect()
}

/// Reads a reply that should be text (bulk or simple string).
pub(crate) fn value_str(v: &Value) -> Option<&str> {
    match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok(),
        Value::SimpleString(s) => Some(s.as_str()),
        _ => None,
    }
}

/// Reads a reply that should be a number, in RESP2 (text) or RESP3 form.
pub(crate) fn value_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Double(d) => Some(*d),
        Value::Int(i) => Some(*i as f64),
        other => value_str(other).and_then(|s| s.parse().ok()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_connections_disable_nagle_and_probe_idle_peers() {
        let info = connection_info("redis://10.1.2.3:6380/2").unwrap();
        let tcp = info.tcp_settings();
        assert!(tcp.nodelay());
        let keepalive = format!("{:?}", tcp.keepalive().expect("keep-alive is set"));
        assert!(keepalive.contains("10s"), "{keepalive}");
        assert!(keepalive.contains("5s"), "{keepalive}");
        assert_eq!(info.redis_settings().db(), 2);
    }

    #[test]
    fn invalid_urls_are_rejected() {
        assert!(connection_info("http://example.com").is_err());
    }
}
