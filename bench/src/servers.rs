//! The processes a run measures: its Redis (through votegraph's own
//! launcher, or the tests' cluster launcher) and the votegraph servers,
//! each stopped when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use votegraph_store::redis_server::RedisServer;

/// A child process, killed when dropped.
pub struct Proc(pub Child);

impl Proc {
    pub fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A Redis on loopback TCP, without persistence; answers it and its
/// `host:port`.
pub async fn start_redis(program: &str, dir: &Path) -> anyhow::Result<(RedisServer, String)> {
    let port = free_port()?;
    let server = RedisServer::builder(dir)
        .program(program)
        .tcp_port(port)
        .start()
        .await
        .with_context(|| format!("starting {program}"))?;
    Ok((server, format!("127.0.0.1:{port}")))
}

// Shared with the API tests, which use all of it.
#[allow(dead_code)]
#[path = "../../tests/support/redis_cluster.rs"]
mod redis_cluster;

/// A Redis Cluster on loopback, stopped when dropped.
pub struct LocalCluster {
    /// Every node's `host:port`, comma-separated (`--redis-cluster-nodes`).
    pub seeds: String,
    /// Each primary's `host:port`.
    pub primaries: Vec<String>,
    _nodes: redis_cluster::RedisCluster,
}

/// The one use of the cluster launcher, so it is easy to repoint.
pub async fn start_redis_cluster(dir: &Path, primaries: usize) -> anyhow::Result<LocalCluster> {
    let nodes = redis_cluster::RedisCluster::start(dir, primaries, 0).await?;
    let ports = nodes.primaries().await;
    Ok(LocalCluster {
        seeds: nodes.seeds(),
        primaries: ports.iter().map(|p| format!("127.0.0.1:{p}")).collect(),
        _nodes: nodes,
    })
}

/// Where a votegraph under test finds Redis.
#[derive(Clone, Copy)]
pub enum RedisAt<'a> {
    /// One primary's `host:port`.
    Primary(&'a str),
    /// A cluster's seed nodes, comma-separated.
    Cluster(&'a str),
}

/// How a votegraph under test is configured.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// As shipped: batching and the anonymous response cache.
    Default,
    /// No response cache: every request does its Redis work.
    Uncached,
}

/// A votegraph under test.
pub struct Votegraph {
    pub proc: Proc,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// From spawn to its first healthy answer.
    pub startup_ms: f64,
}

/// Starts votegraph on `redis_addr` and waits until it is healthy.
pub async fn start_votegraph(
    bin: &PathBuf,
    redis_addr: &str,
    mode: Mode,
) -> anyhow::Result<Votegraph> {
    start_votegraph_on(bin, RedisAt::Primary(redis_addr), mode).await
}

/// Starts votegraph on `redis` and waits until it is healthy.
pub async fn start_votegraph_on(
    bin: &PathBuf,
    redis: RedisAt<'_>,
    mode: Mode,
) -> anyhow::Result<Votegraph> {
    let port = free_port()?;
    let started = Instant::now();
    let mut command = Command::new(bin);
    command.args(["--bind", &format!("127.0.0.1:{port}")]);
    match redis {
        RedisAt::Primary(addr) => command.args(["--redis-url", &format!("redis://{addr}")]),
        RedisAt::Cluster(seeds) => command.args(["--redis-cluster-nodes", seeds]),
    };
    command
        // Votes are still counted against a per-user limit (its cost is
        // measured), but set out of reach, so a run with few `--users`
        // measures votes rather than refusals.
        .args(["--rate-vote", "1000000000/60"])
        // `--cluster` seeds through the API (sign-ups and posts) as fast as
        // it can; no other scenario signs up or posts.
        .env("VOTEGRAPH_RATE_SIGN_UP", "1000000000/60")
        .env("VOTEGRAPH_RATE_POST", "1000000000/60")
        .env("VOTEGRAPH_ARGON2_MEMORY_KIB", "1024")
        .env("VOTEGRAPH_ARGON2_ITERATIONS", "1")
        // The TOP_* upkeep is per second, not per request (docs/performance.md
        // gives its cost): after its first round, keep it out of the per-request
        // Redis counts.
        .args(["--top-upkeep-ms", "60000"])
        .env("RUST_LOG", "warn")
        // Every simulated subscriber connects from 127.0.0.1, so the
        // per-address limits would refuse all but the first few, and the
        // subscribers are more than the default connection cap.
        .env("VOTEGRAPH_WS_MAX_CONNECTIONS_PER_CLIENT", "1000000")
        .env("VOTEGRAPH_MAX_CONNECTIONS_PER_CLIENT", "1000000")
        .env("VOTEGRAPH_MAX_CONNECTIONS", "1000000")
        .stdout(Stdio::null());
    if mode != Mode::Default {
        command.arg("--no-response-cache");
    }
    let proc = Proc(
        command
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?,
    );
    let base = format!("http://127.0.0.1:{port}");
    wait_healthy(&format!("{base}/health"), "votegraph").await?;
    let startup_ms = started.elapsed().as_secs_f64() * 1000.0;
    // On a cluster no other client shares the keyspace, so the server runs
    // no pass, and its count stays at zero.
    if let RedisAt::Primary(_) = redis {
        wait_for_startup_pass(&base).await?;
    }
    Ok(Votegraph {
        proc,
        base,
        startup_ms,
    })
}

/// Waits (up to 10 minutes) until the server's start-up pass over every
/// article is done: background work, not the cost of any request.
async fn wait_for_startup_pass(base: &str) -> anyhow::Result<()> {
    let client = reqwest::Client::new();
    for _ in 0..6000 {
        let health: serde_json::Value = client
            .get(format!("{base}/health"))
            .send()
            .await?
            .json()
            .await?;
        // A server that reports no passes has none to wait for.
        match health["deriver"]["passes"].as_u64() {
            None => return Ok(()),
            Some(passes) if passes >= 1 => return Ok(()),
            Some(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("votegraph's start-up pass did not finish in 10 minutes")
}

/// Waits (up to 5 s) until `url` answers a GET with success.
pub async fn wait_healthy(url: &str, what: &str) -> anyhow::Result<()> {
    let client = reqwest::Client::new();
    for _ in 0..1000 {
        if let Ok(r) = client.get(url).send().await {
            if r.status().is_success() {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    bail!("{what} did not become healthy")
}

/// A server's response-cache counters (logged-in pages' templates
/// included), as `/health` gives them.
#[derive(Clone, Copy, Default)]
pub struct CacheCounts {
    pub hits: u64,
    pub misses: u64,
    pub evicted_by_votes: u64,
}

impl CacheCounts {
    /// The counters of the server at `base` (zero when it does not answer).
    pub async fn of(base: &str) -> Self {
        let body: serde_json::Value = match reqwest::get(format!("{base}/health")).await {
            Ok(r) => r.json().await.unwrap_or_default(),
            Err(_) => serde_json::Value::Null,
        };
        let c = &body["responseCache"];
        Self {
            hits: c["hits"].as_u64().unwrap_or(0),
            misses: c["misses"].as_u64().unwrap_or(0),
            evicted_by_votes: c["evictedByVotes"].as_u64().unwrap_or(0),
        }
    }

    /// What the counters moved by since `before`.
    pub fn since(self, before: Self) -> Self {
        Self {
            hits: self.hits.saturating_sub(before.hits),
            misses: self.misses.saturating_sub(before.misses),
            evicted_by_votes: self
                .evicted_by_votes
                .saturating_sub(before.evicted_by_votes),
        }
    }
}
