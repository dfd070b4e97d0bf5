//! Starts a Redis Cluster on loopback for the API tests and the benchmark
//! (both include this file): one [`RedisServer`] per node, each in its own
//! sub-directory, all stopped when the cluster is dropped.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use tokio::time::{sleep, timeout};

use votegraph_store::redis_server::{RedisServer, RedisServerBuilder, StartError};

/// Why a cluster did not start or become healthy.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("creating {0}: {1}")]
    Dir(PathBuf, #[source] std::io::Error),
    #[error("no free loopback port left")]
    NoPort,
    #[error("node 127.0.0.1:{0}: {1}")]
    Node(u16, #[source] StartError),
    #[error("`redis-cli --cluster create` failed: {0}")]
    Create(String),
    #[error("the cluster was not healthy within {0:?}: {1}")]
    NotHealthy(Duration, String),
}

/// A running cluster, without persistence; every node is stopped when it
/// is dropped.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<Node>,
}

#[derive(Debug)]
struct Node {
    port: u16,
    /// Kept so a killed node restarts with its directory and nodes.conf.
    builder: RedisServerBuilder,
    server: Option<RedisServer>,
}

/// `cluster-node-timeout`: how long a primary may not answer before its
/// replica takes over.
pub const NODE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long creating the cluster and its first convergence may take.
const READY_WITHIN: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(50);

impl RedisCluster {
    /// `primaries` primaries with `replicas_per_primary` replicas each, in
    /// sub-directories of `dir`, once healthy; on an error every node
    /// started so far is stopped.
    pub async fn start(
        dir: &Path,
        primaries: usize,
        replicas_per_primary: usize,
    ) -> Result<Self, ClusterError> {
        let mut cluster = Self { nodes: Vec::new() };
        for _ in 0..primaries * (1 + replicas_per_primary) {
            cluster.nodes.push(start_node(dir).await?);
        }
        cluster.create(replicas_per_primary).await?;
        cluster.wait_healthy(READY_WITHIN).await?;
        Ok(cluster)
    }

    /// Every node's `127.0.0.1:port`, comma-separated (`--redis-cluster-nodes`).
    pub fn seeds(&self) -> String {
        let seeds: Vec<String> = self
            .ports()
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        seeds.join(",")
    }

    /// Every node's port, running or not.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// The running nodes that say they are primaries.
    pub async fn primaries(&self) -> Vec<u16> {
        let mut out = Vec::new();
        for port in self.live() {
            let info = query(port, redis::cmd("INFO").arg("replication")).await;
            if info.as_deref().and_then(|i| field(i, "role")) == Some("master") {
                out.push(port);
            }
        }
        out
    }

    /// Kills the node on `port` at once, as a crash would (panics if no
    /// node has that port).
    pub fn kill(&mut self, port: u16) {
        if let Some(mut server) = self.node(port).server.take() {
            server.kill();
        }
    }

    /// Starts the killed node on `port` again, with its directory and
    /// nodes.conf, so it rejoins (as a replica if it was replaced).
    pub async fn restart(&mut self, port: u16) -> Result<(), ClusterError> {
        let node = self.node(port);
        if node.server.is_none() {
            let started = node.builder.start().await;
            node.server = Some(started.map_err(|e| ClusterError::Node(port, e))?);
        }
        Ok(())
    }

    /// Waits until every running node says `cluster_state:ok` with all
    /// slots, they agree that running primaries hold the slots, and every
    /// running replica's link to its primary is up.
    pub async fn wait_healthy(&self, within: Duration) -> Result<(), ClusterError> {
        let deadline = Instant::now() + within;
        loop {
            let Some(why) = self.unhealthy().await else {
                return Ok(());
            };
            if Instant::now() >= deadline {
                return Err(ClusterError::NotHealthy(within, why));
            }
            sleep(POLL).await;
        }
    }

    fn node(&mut self, port: u16) -> &mut Node {
        let node = self.nodes.iter_mut().find(|n| n.port == port);
        node.unwrap_or_else(|| panic!("no cluster node on port {port}"))
    }

    fn live(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| n.server.is_some())
            .map(|n| n.port)
            .collect()
    }

    /// Why the cluster is not healthy yet, if it is not.
    async fn unhealthy(&self) -> Option<String> {
        let live = self.live();
        let mut agreed: Option<Vec<u16>> = None;
        for &port in &live {
            let owners = match slot_owners(port).await {
                Ok(owners) => owners,
                Err(why) => return Some(format!("127.0.0.1:{port}: {why}")),
            };
            if let Some(down) = owners.iter().find(|p| !live.contains(p)) {
                return Some(format!("127.0.0.1:{port} sees slots on {down}, down"));
            }
            match &agreed {
                Some(seen) if *seen != owners => {
                    return Some(format!("primaries {seen:?} or {owners:?}"))
                }
                _ => agreed = Some(owners),
            }
        }
        agreed.is_none().then(|| "no node runs".to_owned())
    }

    async fn create(&self, replicas: usize) -> Result<(), ClusterError> {
        let program = std::env::var_os("REDIS_CLI").unwrap_or_else(|| "redis-cli".into());
        let mut command = tokio::process::Command::new(&program);
        command
            .args(["--cluster", "create"])
            .args(self.seeds().split(','));
        command.args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"]);
        let run = command.stdin(Stdio::null()).kill_on_drop(true).output();
        let output = timeout(READY_WITHIN, run)
            .await
            .map_err(|_| ClusterError::Create(format!("no end within {READY_WITHIN:?}")))?
            .map_err(|e| ClusterError::Create(format!("{}: {e}", program.to_string_lossy())))?;
        if output.status.success() {
            return Ok(());
        }
        let text =
            String::from_utf8_lossy(&output.stdout) + String::from_utf8_lossy(&output.stderr);
        // Its last lines say what went wrong; the rest is the plan.
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(5)..].join("\n");
        Err(ClusterError::Create(format!("{}\n{tail}", output.status)))
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        // Each node may take its stop timeout; stop them together.
        std::thread::scope(|scope| {
            for node in self.nodes.drain(..) {
                scope.spawn(move || drop(node));
            }
        });
    }
}

async fn start_node(dir: &Path) -> Result<Node, ClusterError> {
    let (port, bus) = (free_port()?, free_port()?);
    let dir = dir.join(port.to_string());
    std::fs::create_dir_all(&dir).map_err(|e| ClusterError::Dir(dir.clone(), e))?;
    let (node_timeout, bus) = (NODE_TIMEOUT.as_millis().to_string(), bus.to_string());
    let builder = RedisServer::builder(&dir)
        .tcp_port(port)
        .log_file("redis.log")
        .args(["--cluster-enabled", "yes", "--cluster-port", &bus])
        .args(["--cluster-config-file", "nodes.conf"])
        .args(["--cluster-node-timeout", &node_timeout])
        // A replica takes over however long its link was down.
        .args(["--cluster-replica-validity-factor", "0"]);
    let started = builder.start().await;
    let server = Some(started.map_err(|e| ClusterError::Node(port, e))?);
    Ok(Node {
        port,
        builder,
        server,
    })
}

/// The primaries holding slots as the node on `port` sees them, once it
/// says the cluster is ok and its own role is settled.
async fn slot_owners(port: u16) -> Result<Vec<u16>, String> {
    let info = query(port, redis::cmd("CLUSTER").arg("INFO")).await;
    let info = info.ok_or("no answer")?;
    for (name, want) in [("cluster_state", "ok"), ("cluster_slots_ok", "16384")] {
        if field(&info, name) != Some(want) {
            return Err(format!("{name}:{}", field(&info, name).unwrap_or("?")));
        }
    }
    let nodes = query(port, redis::cmd("CLUSTER").arg("NODES")).await;
    let replication = query(port, redis::cmd("INFO").arg("replication")).await;
    let (Some(nodes), Some(replication)) = (nodes, replication) else {
        return Err("no answer".to_owned());
    };
    // id, address, flags, master, ping, pong, epoch, link, slots…
    let holding = cluster_nodes(&nodes).filter(|(_, f)| f.len() > 8 && f[2].contains("master"));
    let mut owners: Vec<u16> = holding.map(|(port, _)| port).collect();
    owners.sort_unstable();
    match field(&replication, "role") {
        Some("master") if !owners.contains(&port) => Err("a primary without slots".to_owned()),
        Some("slave") if field(&replication, "master_link_status") != Some("up") => {
            Err("a replica whose link is down".to_owned())
        }
        _ => Ok(owners),
    }
}

/// CLUSTER NODES' lines as each node's port and fields.
fn cluster_nodes(text: &str) -> impl Iterator<Item = (u16, Vec<&str>)> {
    text.lines().filter_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        let address = fields.get(1)?.split('@').next()?;
        Some((address.rsplit(':').next()?.parse().ok()?, fields))
    })
}

/// A node's answer to `command` as text, or None (within a second).
async fn query(port: u16, command: &redis::Cmd) -> Option<String> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?;
    let ask = async {
        let mut conn = client.get_multiplexed_async_connection().await.ok()?;
        command.query_async::<String>(&mut conn).await.ok()
    };
    timeout(Duration::from_secs(1), ask).await.ok()?
}

/// The value of `name:value` in an INFO-style answer.
fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    let value = info
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'));
    value.map(str::trim)
}

/// A loopback port free now and not handed out before by this process,
/// below the tests' own ports (20000 and up) and the ephemeral range, so
/// no outgoing connection takes it before its node listens.
fn free_port() -> Result<u16, ClusterError> {
    const FIRST: u16 = 10_000;
    const SPAN: u16 = 10_000;
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let start = (std::process::id() % u32::from(SPAN)) as u16;
    loop {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed);
        if offset >= SPAN {
            return Err(ClusterError::NoPort);
        }
        let port = FIRST + (start + offset) % SPAN;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
}
