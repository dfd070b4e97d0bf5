//! A private `redis-server` per test, and what tests read or do to it:
//! command statistics, pauses, killed pub/sub connections, the server's
//! background indexes.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tempfile::TempDir;
use votegraph_store::redis_server::{RedisServer, RedisServerBuilder};

use super::time::eventually_every;

/// A private `redis-server` on a unix socket in a temporary directory.
pub struct TestRedis {
    server: Option<RedisServer>,
    /// How it is started, kept for restarts.
    builder: RedisServerBuilder,
    _dir: TempDir,
}

impl TestRedis {
    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    /// One started with more `redis-server` arguments, e.g.
    /// `["--rename-command", "CONFIG", ""]`.
    pub async fn start_with(extra: &[&str]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("vg")
            .tempdir()
            .expect("temp dir");
        let builder = RedisServer::builder(dir.path()).args(extra);
        let mut redis = Self {
            server: None,
            builder,
            _dir: dir,
        };
        redis.launch().await;
        redis
    }

    /// The unix socket it listens on.
    pub fn socket(&self) -> PathBuf {
        self.builder.dir().join("redis.sock")
    }

    pub fn url(&self) -> String {
        self.builder.url()
    }

    async fn launch(&mut self) {
        let server = self.builder.start().await.expect(
            "redis-server must be installed to run the tests (apt-get install redis-server)",
        );
        self.server = Some(server);
    }

    async fn try_conn(&self) -> redis::RedisResult<MultiplexedConnection> {
        redis::Client::open(self.url())?
            .get_multiplexed_async_connection()
            .await
    }

    /// A direct connection, for arranging and inspecting data.
    pub async fn conn(&self) -> MultiplexedConnection {
        self.try_conn().await.expect("connect to test redis")
    }

    /// Kills the server (as a crash would).
    pub fn stop(&mut self) {
        if let Some(mut server) = self.server.take() {
            server.kill();
        }
        let _ = std::fs::remove_file(self.socket());
    }

    /// Starts it again on the same socket (empty, as no data is persisted).
    pub async fn restart(&mut self) {
        self.stop();
        self.launch().await;
    }
}

/// The text of Redis' `INFO section`.
pub async fn redis_info(conn: &mut MultiplexedConnection, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query_async(conn)
        .await
        .expect("INFO")
}

/// A number of `INFO section`: `field:<number>`.
pub async fn info_field(conn: &mut MultiplexedConnection, section: &str, field: &str) -> u64 {
    redis_info(conn, section)
        .await
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in INFO {section}"))
}

/// Redis' count of read events: one per request (or pipeline) it receives.
pub async fn reads_processed(conn: &mut MultiplexedConnection) -> u64 {
    info_field(conn, "stats", "total_reads_processed").await
}

/// Calls of each Redis command since the last [`reset_command_stats`],
/// leaving out the test's own `INFO` and `CONFIG`.
pub async fn command_stats(conn: &mut MultiplexedConnection) -> HashMap<String, u64> {
    redis_info(conn, "commandstats")
        .await
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(":calls=")?;
            let calls = rest.split(',').next()?.parse().ok()?;
            // `config|resetstat` on Redis 7, `config` before.
            let own = name == "info" || name.starts_with("config");
            (!own).then(|| (name.to_owned(), calls))
        })
        .collect()
}

/// Zeroes Redis' command counters (see [`command_stats`]).
pub async fn reset_command_stats(conn: &mut MultiplexedConnection) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(conn)
        .await
        .expect("CONFIG RESETSTAT");
}

/// Kills every pub/sub connection (as a network blip would); answers how
/// many there were.
pub async fn kill_pubsub_connections(conn: &mut MultiplexedConnection) -> i64 {
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(conn)
        .await
        .expect("CLIENT KILL")
}

/// How many times Redis ran `command` so far.
pub async fn command_calls(conn: &mut MultiplexedConnection, command: &str) -> u64 {
    let prefix = format!("cmdstat_{command}:calls=");
    redis_info(conn, "commandstats")
        .await
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Holds every Redis client's commands for `ms` milliseconds.
pub async fn pause_redis(conn: &mut MultiplexedConnection, ms: u64) {
    let () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(ms)
        .arg("ALL")
        .query_async(conn)
        .await
        .unwrap();
}

/// Waits until the first round of the TOP_* rankings' upkeep is done: the
/// build from `score:` and `time:`, then the pruning, whose last period
/// leaves its mark.
pub async fn wait_for_top_index(conn: &mut MultiplexedConnection) {
    eventually_every(
        "the TOP_* rankings to be built",
        Duration::from_secs(5),
        Duration::from_millis(10),
        async || {
            redis::cmd("HEXISTS")
                .arg("index:top:pruned")
                .arg("year")
                .query_async::<bool>(conn)
                .await
                .expect("EXISTS")
        },
    )
    .await;
}
