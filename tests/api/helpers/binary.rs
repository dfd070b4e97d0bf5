//! The `votegraph` binary as a child process, for what an in-process
//! server cannot show.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;

use tempfile::TempDir;

use super::time::poll_until;

/// The `votegraph` binary as a child process, logging to a file; killed
/// when dropped. For what an in-process server cannot show: its own
/// resident memory and its log.
pub struct Binary {
    child: Child,
    pub address: String,
    pub log: PathBuf,
    _dir: TempDir,
}

impl Binary {
    /// Starts the binary on `redis_url` with the test settings' cheap
    /// hashing, plus `env` (`VOTEGRAPH_…` settings), and waits until
    /// `/health` answers 200.
    pub async fn start(redis_url: &str, env: &[(&str, &str)]) -> Self {
        Self::launch(redis_url, env, true).await
    }

    /// Like [`Binary::start`], but waits only for `/health` to answer at
    /// all (503 while Redis is unreachable).
    pub async fn start_answering(redis_url: &str, env: &[(&str, &str)]) -> Self {
        Self::launch(redis_url, env, false).await
    }

    async fn launch(redis_url: &str, env: &[(&str, &str)], healthy: bool) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("vgb")
            .tempdir()
            .expect("temp dir");
        let log = dir.path().join("votegraph.log");
        let port = free_port();
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let mut command = Command::new(env!("CARGO_BIN_EXE_votegraph"));
        command
            .env("REDIS_URL", redis_url)
            .env("VOTEGRAPH_BIND", format!("127.0.0.1:{port}"))
            .env("VOTEGRAPH_ARGON2_MEMORY_KIB", "1024")
            .env("VOTEGRAPH_ARGON2_ITERATIONS", "1")
            .env("RUST_LOG", "info")
            .stdout(out)
            .stderr(err);
        for (k, v) in env {
            command.env(k, v);
        }
        // A cluster is named instead of a URL, never beside one.
        if env.iter().any(|(k, _)| *k == "REDIS_CLUSTER_NODES") {
            command.env_remove("REDIS_URL");
        }
        let child = command.spawn().expect("start votegraph");
        let binary = Self {
            child,
            address: format!("http://127.0.0.1:{port}"),
            log,
            _dir: dir,
        };
        let health = format!("{}/health", binary.address);
        let answered = poll_until(
            Duration::from_secs(10),
            Duration::from_millis(50),
            async || {
                let response = reqwest::get(&health).await;
                response.is_ok_and(|r| r.status().is_success() || !healthy)
            },
        )
        .await;
        if answered.is_err() {
            panic!("votegraph did not start: {}", binary.log_text());
        }
        binary
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident memory, in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("/proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS")
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nothing listens on now, and never handed out before by
/// this process.
///
/// The ports come from below the kernel's ephemeral range (32768 and up),
/// counting up from a start that differs per process: a port picked by
/// `bind(0)` is an ephemeral one, so another test's outgoing connection
/// could take it while a test restarts its server on it.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    const FIRST: u16 = 20_000;
    const SPAN: u16 = 12_000;
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let start = (std::process::id() % u32::from(SPAN)) as u16;
    loop {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed);
        assert!(
            offset < SPAN,
            "no loopback port left below the ephemeral range"
        );
        let port = FIRST + (start + offset) % SPAN;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}
