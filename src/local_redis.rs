//! A `redis-server` that votegraph runs itself when no `REDIS_URL` is given,
//! so that one command gives a working server with persistent data.
//!
//! It listens only on a unix socket inside the data directory (nothing else
//! on the machine can reach it), keeps an append-only file there, and is shut
//! down with a final save when votegraph stops.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context as _};
use tokio::process::{Child, Command};

pub struct LocalRedis {
    child: Child,
    url: String,
}

/// Unix socket paths are limited to about 108 bytes by the kernel.
const MAX_SOCKET_PATH: usize = 100;

impl LocalRedis {
    pub async fn start(program: &str, data_dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(data_dir)
            .with_context(|| format!("creating data directory {}", data_dir.display()))?;
        let dir = data_dir
            .canonicalize()
            .with_context(|| format!("resolving {}", data_dir.display()))?;
        let socket = socket_path(&dir);
        let _ = std::fs::remove_file(&socket);
        let mut command = Command::new(program);
        command
            .arg("--port")
            .arg("0")
            .arg("--unixsocket")
            .arg(&socket)
            .arg("--unixsocketperm")
            .arg("700")
            .arg("--dir")
            .arg(&dir)
            .arg("--appendonly")
            .arg("yes")
            .arg("--logfile")
            .arg("redis.log")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let child = match command.spawn() {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
                "`{program}` was not found, and REDIS_URL is not set.\n\
                 Install Redis, e.g. `sudo apt-get install -y redis-server` (Debian/Ubuntu) \
                 or `brew install redis` (macOS), or run `scripts/serve.sh`, which installs it;\n\
                 or point REDIS_URL at a running Redis."
            ),
            Err(e) => return Err(e).context(format!("starting `{program}`")),
        };
        let url = format!("redis+unix://{}", socket.display());
        let mut local = Self { child, url };
        local.wait_ready().await?;
        tracing::info!(dir = %dir.display(), "started a local redis-server");
        Ok(local)
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let client = redis::Client::open(self.url.as_str())?;
        for _ in 0..100 {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "redis-server exited at start ({status}); see redis.log in the data directory"
                );
            }
            if let Ok(mut conn) = client.get_multiplexed_async_connection().await {
                let pong: redis::RedisResult<String> =
                    redis::cmd("PING").query_async(&mut conn).await;
                if pong.is_ok() {
                    return Ok(());
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("redis-server did not answer within 5 seconds")
    }

    /// Saves and stops the server; kills it if it does not stop in time.
    pub async fn stop(mut self) {
        if let Ok(client) = redis::Client::open(self.url.as_str()) {
            if let Ok(mut conn) = client.get_multiplexed_async_connection().await {
                // The connection closes as the server exits, so the reply is an error.
                let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN")
                    .arg("SAVE")
                    .query_async(&mut conn)
                    .await;
            }
        }
        match tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await {
            Ok(_) => tracing::info!("local redis-server stopped"),
            Err(_) => {
                tracing::warn!("local redis-server did not stop in time; killing it");
                let _ = self.child.kill().await;
            }
        }
    }
}

fn socket_path(dir: &Path) -> PathBuf {
    let socket = dir.join("redis.sock");
    if socket.as_os_str().len() <= MAX_SOCKET_PATH {
        socket
    } else {
        // A deep data directory: keep the socket in a short, private place.
        std::env::temp_dir().join(format!("votegraph-{}.sock", std::process::id()))
    }
}
