//! The `redis-server` votegraph runs itself without `REDIS_URL`, in the data
//! directory. Two on one directory would corrupt it: a lock on
//! `votegraph.lock` (dropped however the process dies) keeps one there.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};

use crate::redis_server::{answers_ping, RedisServer, StartError};

pub struct LocalRedis {
    server: RedisServer,
    /// Held until votegraph exits; see the module's doc.
    _lock: std::fs::File,
}

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
        let socket = socket_path(&dir, std::process::id());
        let builder = RedisServer::builder(&dir)
            .program(program)
            .unix_socket(&socket)
            .persistent(true)
            .log_file("redis.log")
            .inherit_stderr(true)
            .own_process_group(true);
        if answers_ping(&redis::Client::open(builder.url())?).await {
            bail!(
                "a redis-server is already running on {socket} (left behind by a votegraph that \
                 was killed?), and starting a second one on the same data would corrupt it.\n\
                 Stop it with `redis-cli -s {socket} shutdown save`, then start votegraph again; \
                 or use it as it is with REDIS_URL=redis+unix://{socket}",
                socket = socket.display()
            );
        }
        let _ = std::fs::remove_file(&socket);
        let server = match builder.start().await {
            Ok(server) => server,
            Err(StartError::NotFound(_)) => bail!(
                "`{program}` was not found, and REDIS_URL is not set.\n\
                 Install Redis, e.g. `sudo apt-get install -y redis-server` (Debian/Ubuntu) \
                 or `brew install redis` (macOS), or run `scripts/serve.sh`, which installs it;\n\
                 or point REDIS_URL at a running Redis."
            ),
            Err(StartError::Exited(status)) => bail!(
                "redis-server exited at start ({status}); see redis.log in the data directory"
            ),
            Err(e) => return Err(e.into()),
        };
        tracing::info!(dir = %dir.display(), "started a local redis-server");
        Ok(Self {
            server,
            _lock: lock,
        })
    }

    pub fn url(&self) -> &str {
        self.server.url()
    }

    /// Saves and stops the server; kills it if it does not stop in time.
    pub async fn stop(self) {
        self.server.stop().await;
        tracing::info!("local redis-server stopped");
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
            let socket = socket_path(dir, holder.parse().unwrap_or(0));
            let pid = (!holder.is_empty()).then(|| format!(" (pid {holder})"));
            let pid = pid.unwrap_or_default();
            bail!(
                "another votegraph{pid} is already running on the data directory {dir}, with \
                 its own redis-server there.\n\
                 Stop it first (Ctrl-C), or give this one another directory with --data-dir \
                 (VOTEGRAPH_DATA_DIR), or share its Redis with \
                 REDIS_URL=redis+unix://{socket}",
                dir = dir.display(),
                socket = socket.display(),
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

/// The socket of the server that the votegraph of process `pid` runs in
/// `dir`.
fn socket_path(dir: &Path, pid: u32) -> PathBuf {
    let socket = dir.join("redis.sock");
    if socket.as_os_str().len() <= MAX_SOCKET_PATH {
        socket
    } else {
        // A deep data directory: keep the socket in a short, private place.
        std::env::temp_dir().join(format!("votegraph-{pid}.sock"))
    }
}

/// The URL of the `redis-server` a running votegraph keeps in `data_dir`
/// (found through its lock file), for commands run beside it; an error
/// saying what to do when none answers there.
pub async fn running_url(data_dir: &Path) -> anyhow::Result<String> {
    let not_running = || {
        anyhow::anyhow!(
            "no running votegraph server keeps its Redis in the data directory {:?}: start the \
             server first (with the same --data-dir), or set REDIS_URL to the Redis the servers use",
            data_dir
        )
    };
    let dir = data_dir.canonicalize().map_err(|_| not_running())?;
    let holder = std::fs::read_to_string(dir.join(LOCK_FILE)).unwrap_or_default();
    let socket = socket_path(&dir, holder.trim().parse().unwrap_or(0));
    let url = format!("redis+unix://{}", socket.display());
    let client = redis::Client::open(url.as_str()).map_err(|_| not_running())?;
    match answers_ping(&client).await {
        true => Ok(url),
        false => Err(not_running()),
    }
}
