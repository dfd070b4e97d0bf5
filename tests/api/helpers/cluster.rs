//! A Redis Cluster on loopback per test (`tests/support/redis_cluster.rs`), in a
//! temporary directory of its own.

// Each test uses the part it needs; none may use all of it.
#![allow(dead_code)]

use std::process::Stdio;
use std::time::Duration;

use tempfile::TempDir;
use tokio::process::Command;
#[path = "../../support/redis_cluster.rs"]
mod redis_cluster;

use redis_cluster::{ClusterError, RedisCluster, NODE_TIMEOUT};

/// A test's cluster on 127.0.0.1; every node is stopped when it is dropped.
pub struct TestCluster {
    // First, so the nodes stop before their directory is removed.
    cluster: RedisCluster,
    _dir: TempDir,
}

impl TestCluster {
    /// `primaries` primaries with `replicas_per_primary` replicas each,
    /// every slot served and every replica attached.
    pub async fn start(primaries: usize, replicas_per_primary: usize) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("vg-cluster")
            .tempdir()
            .expect("temp dir");
        let cluster = RedisCluster::start(dir.path(), primaries, replicas_per_primary)
            .await
            .expect("a Redis Cluster (needs redis-server and redis-cli, apt-get install redis)");
        Self { cluster, _dir: dir }
    }

    /// The nodes' `127.0.0.1:port`, comma-separated (`--redis-cluster-nodes`).
    pub fn seeds(&self) -> String {
        self.cluster.seeds()
    }

    /// Every node's port, running or not.
    pub fn ports(&self) -> Vec<u16> {
        self.cluster.ports()
    }

    /// The running nodes that say they are primaries.
    pub async fn primaries(&self) -> Vec<u16> {
        self.cluster.primaries().await
    }

    /// The URL of the node on `port`, for direct connections.
    pub fn node_url(&self, port: u16) -> String {
        format!("redis://127.0.0.1:{port}")
    }

    /// The primary that holds the key whose name ends with `suffix`.
    pub async fn holder(&self, suffix: &str) -> u16 {
        for port in self.primaries().await {
            let client = redis::Client::open(self.node_url(port)).unwrap();
            let mut conn = client.get_multiplexed_async_connection().await.unwrap();
            let found: Vec<String> = redis::cmd("KEYS")
                .arg(format!("*}}{suffix}"))
                .query_async(&mut conn)
                .await
                .unwrap();
            if !found.is_empty() {
                return port;
            }
        }
        panic!("no primary holds {suffix}")
    }

    /// Kills the node on `port`, as a crash would.
    pub fn kill(&mut self, port: u16) {
        self.cluster.kill(port);
    }

    /// Starts the killed node on `port` again; it rejoins.
    pub async fn restart(&mut self, port: u16) -> Result<(), ClusterError> {
        self.cluster.restart(port).await
    }

    /// Waits until the running nodes serve every slot and every replica is
    /// attached; after a kill, detection alone takes [`NODE_TIMEOUT`].
    pub async fn wait_healthy(&self, within: Duration) -> Result<(), ClusterError> {
        self.cluster.wait_healthy(within).await
    }

    /// Moves `slots` slots, with their keys, from the primary on `from` to
    /// the one on `to` (`redis-cli --cluster reshard`), then waits until
    /// the cluster is healthy.
    pub async fn reshard(&self, from: u16, to: u16, slots: usize) {
        let (from_id, to_id) = (node_id(from).await, node_id(to).await);
        let program = std::env::var_os("REDIS_CLI").unwrap_or_else(|| "redis-cli".into());
        let output = Command::new(program)
            .args(["--cluster", "reshard", &format!("127.0.0.1:{from}")])
            .args(["--cluster-from", &from_id, "--cluster-to", &to_id])
            .args(["--cluster-slots", &slots.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .await
            .expect("run redis-cli");
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "reshard failed: {text}");
        let within = NODE_TIMEOUT * 5;
        self.wait_healthy(within)
            .await
            .expect("healthy after resharding");
    }
}

/// The cluster node id of the node on `port`.
async fn node_id(port: u16) -> String {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let id = redis::cmd("CLUSTER")
        .arg("MYID")
        .query_async(&mut conn)
        .await;
    id.expect("CLUSTER MYID")
}
