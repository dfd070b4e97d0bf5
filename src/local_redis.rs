//! A `redis-server` that votegraph runs itself when no `REDIS_URL` is given,
//! so that one command gives a working server with persistent data.
//!
//! It listens only on a unix socket inside the data directory (nothing else
//! on the machine can reach it), keeps an append-only file there, and is shut
//! down with a final save when votegraph stops.
//!
//! One data directory has one Redis: two Redis processes appending to one
//! file would corrupt it, and a second one would take the first's socket.
//! So votegraph holds a lock on `votegraph.lock` in the directory for as
//! long as it runs (the kernel drops it when the process dies, however it
//! dies), and refuses to start a Redis where one still answers (one a
//! killed votegraph left behind).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context as _};
use tokio::process::{Child, Command};

pub struct LocalRedis {
    child: Child,
    url: String,
    /// Held until votegraph exits; see the module's doc.
    _lock: std::fs::File,
}

/// The lock file in the data directory.
const LOCK_FILE: &str = "votegraph.lock";

/// Unix socket paths are limited to about 108 bytes by the kernel.
const MAX_SOCKET_PATH: usize = 100;

impl LocalRedis {
    pub async fn start(program: &str, data_dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(data_dir)
            .with_context(|| format!("creating data directory {}", data_dir.display()))?;
        let dir = data_dir
            .canonicalize()
            .with_context(|| format!("resolving {}", data_dir.display()))?;
        let lock = lock_data_dir(&dir)?;
        let socket = socket_path(&dir);
        if answers_ping(&socket).await {
            bail!(
                "a redis-server is already running on {socket} (left behind by a votegraph that \
                 was killed?), and starting a second one on the same data would corrupt it.\n\
                 Stop it with `redis-cli -s {socket} shutdown save`, then start votegraph again; \
                 or use it as it is with REDIS_URL=redis+unix://{socket}",
                socket = socket.display()
            );
        }
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
        let mut local = Self {
            child,
            url,
            _lock: lock,
        };
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

/// Takes the data directory's lock, or says who holds it.
fn lock_data_dir(dir: &Path) -> anyhow::Result<std::fs::File> {
    use std::io::{Read as _, Seek as _, Write as _};
    let path = dir.join(LOCK_FILE);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            let pid = if holder.is_empty() {
                String::new()
            } else {
                format!(" (pid {holder})")
            };
            bail!(
                "another votegraph{pid} is already running on the data directory {dir}, with \
                 its own redis-server there.\n\
                 Stop it first (Ctrl-C), or give this one another directory with --data-dir \
                 (VOTEGRAPH_DATA_DIR), or share its Redis with \
                 REDIS_URL=redis+unix://{socket}",
                dir = dir.display(),
                socket = socket_path(dir).display(),
            );
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(e).with_context(|| format!("locking {}", path.display()))
        }
    }
    // Who holds it, for the message a second instance shows.
    let _ = file.set_len(0);
    let _ = file.rewind();
    let _ = write!(file, "{}", std::process::id());
    Ok(file)
}

/// Whether a Redis answers PING on `socket` (within a second).
async fn answers_ping(socket: &Path) -> bool {
    if !socket.exists() {
        return false;
    }
    let url = format!("redis+unix://{}", socket.display());
    let Ok(client) = redis::Client::open(url.as_str()) else {
        return false;
    };
    let ping = async {
        let mut conn = client.get_multiplexed_async_connection().await.ok()?;
        redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .ok()
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(1), ping).await,
        Ok(Some(_))
    )
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
