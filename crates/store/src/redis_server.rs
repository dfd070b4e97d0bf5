//! Starts and stops a `redis-server` process (local mode, tests, benchmark):
//! it answers `PING` once started, and is stopped when dropped.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Where a server listens.
#[derive(Clone, Debug)]
enum Listen {
    /// A unix socket only (TCP off), reachable by this machine's user.
    UnixSocket(PathBuf),
    /// TCP on 127.0.0.1.
    Tcp(u16),
}

/// What a server is started with; [`Clone`], so it can be started again.
#[derive(Clone, Debug)]
pub struct RedisServerBuilder {
    program: OsString,
    dir: PathBuf,
    listen: Listen,
    persistent: bool,
    args: Vec<OsString>,
    log_file: Option<String>,
    inherit_stderr: bool,
    own_process_group: bool,
}

/// Why a server did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("`{0}` was not found")]
    NotFound(String),
    #[error("starting `{0}`: {1}")]
    Spawn(String, #[source] std::io::Error),
    #[error("redis-server exited at start ({0})")]
    Exited(ExitStatus),
    #[error("redis-server did not answer within {0:?}")]
    NotReady(Duration),
}

/// A running `redis-server`, stopped when dropped.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    url: String,
    persistent: bool,
}

/// How long a stopping server may take to save before it is killed.
const SAVE_WITHIN: Duration = Duration::from_secs(10);
/// How long a server without persistence may take to stop.
const STOP_WITHIN: Duration = Duration::from_secs(2);
/// How often start-up and stopping look at the process again.
const POLL: Duration = Duration::from_millis(10);
/// How long start-up may take before it counts as failed.
const READY_WITHIN: Duration = Duration::from_secs(5);

impl RedisServer {
    /// A server working in `dir`, on the unix socket `dir/redis.sock`,
    /// without persistence, until the builder says otherwise.
    pub fn builder(dir: impl Into<PathBuf>) -> RedisServerBuilder {
        let dir = dir.into();
        RedisServerBuilder {
            program: std::env::var_os("REDIS_SERVER").unwrap_or_else(|| "redis-server".into()),
            listen: Listen::UnixSocket(dir.join("redis.sock")),
            dir,
            persistent: false,
            args: Vec::new(),
            log_file: None,
            inherit_stderr: false,
            own_process_group: false,
        }
    }

    /// The URL clients connect with (`redis+unix://…` or `redis://…`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Stops the server with `SHUTDOWN` (saving first when persistent),
    /// and kills it if it does not exit in time.
    pub async fn stop(self) {
        // Dropping stops it, waiting as a blocking thread may.
        let _ = tokio::task::spawn_blocking(move || drop(self)).await;
    }

    /// Kills the server at once, as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let conn = redis::Client::open(self.url.as_str())
            .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(1)));
        if let Ok(mut conn) = conn {
            // A paused or busy server must not hold its owner's drop.
            let _ = conn.set_read_timeout(Some(Duration::from_secs(1)));
            let save = if self.persistent { "SAVE" } else { "NOSAVE" };
            let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").arg(save).query(&mut conn);
        }
        let stop_within = if self.persistent {
            SAVE_WITHIN
        } else {
            STOP_WITHIN
        };
        let deadline = Instant::now() + stop_within;
        while Instant::now() < deadline {
            if !matches!(child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(POLL);
        }
        tracing::warn!("redis-server did not stop in time; killing it");
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl RedisServerBuilder {
    /// The program to run (default: `$REDIS_SERVER`, else `redis-server`).
    pub fn program(mut self, program: impl Into<OsString>) -> Self {
        self.program = program.into();
        self
    }

    /// Listens on this unix socket only.
    pub fn unix_socket(mut self, path: impl Into<PathBuf>) -> Self {
        self.listen = Listen::UnixSocket(path.into());
        self
    }

    /// Listens on 127.0.0.1:`port` only.
    pub fn tcp_port(mut self, port: u16) -> Self {
        self.listen = Listen::Tcp(port);
        self
    }

    /// Keeps an append-only file in the directory, saved on stop.
    pub fn persistent(mut self, on: bool) -> Self {
        self.persistent = on;
        self
    }

    /// More command-line arguments, after those the builder sets.
    pub fn args<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, args: I) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Logs to this file, relative to the directory.
    pub fn log_file(mut self, name: impl Into<String>) -> Self {
        self.log_file = Some(name.into());
        self
    }

    /// Shows what the server writes to stderr (before its log file opens).
    pub fn inherit_stderr(mut self, on: bool) -> Self {
        self.inherit_stderr = on;
        self
    }

    /// Runs the server in a process group of its own, so a Ctrl-C in the
    /// terminal reaches its owner alone, which stops it once done with it.
    pub fn own_process_group(mut self, on: bool) -> Self {
        self.own_process_group = on;
        self
    }

    /// The URL the server will answer on.
    pub fn url(&self) -> String {
        match &self.listen {
            Listen::UnixSocket(path) => format!("redis+unix://{}", path.display()),
            Listen::Tcp(port) => format!("redis://127.0.0.1:{port}"),
        }
    }

    /// The directory the server works in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Starts the server and waits until it answers `PING`.
    pub async fn start(&self) -> Result<RedisServer, StartError> {
        let program = self.program.to_string_lossy().into_owned();
        let child = self.command().spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => StartError::NotFound(program.clone()),
            _ => StartError::Spawn(program.clone(), e),
        })?;
        let mut server = RedisServer {
            child: Some(child),
            url: self.url(),
            persistent: self.persistent,
        };
        self.wait_ready(&mut server).await?;
        Ok(server)
    }

    fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        match &self.listen {
            Listen::UnixSocket(path) => {
                command.args(["--port", "0", "--unixsocket"]).arg(path);
                command.args(["--unixsocketperm", "700"]);
            }
            Listen::Tcp(port) => {
                command.args(["--bind", "127.0.0.1", "--port", &port.to_string()]);
            }
        }
        command.arg("--dir").arg(&self.dir);
        if self.persistent {
            command.args(["--appendonly", "yes"]);
        } else {
            command.args(["--save", "", "--appendonly", "no"]);
        }
        if let Some(log) = &self.log_file {
            command.args(["--logfile", log]);
        }
        command.args(&self.args);
        #[cfg(unix)]
        if self.own_process_group {
            use std::os::unix::process::CommandExt as _;
            command.process_group(0);
        }
        command.stdin(Stdio::null()).stdout(Stdio::null());
        command.stderr(if self.inherit_stderr {
            Stdio::inherit()
        } else {
            Stdio::null()
        });
        command
    }

    async fn wait_ready(&self, server: &mut RedisServer) -> Result<(), StartError> {
        let client = redis::Client::open(server.url.as_str())
            .map_err(|e| StartError::Spawn(server.url.clone(), std::io::Error::other(e)))?;
        let deadline = Instant::now() + READY_WITHIN;
        while Instant::now() < deadline {
            if let Some(Ok(Some(status))) = server.child.as_mut().map(Child::try_wait) {
                server.child = None;
                return Err(StartError::Exited(status));
            }
            if answers_ping(&client).await {
                return Ok(());
            }
            tokio::time::sleep(POLL).await;
        }
        Err(StartError::NotReady(READY_WITHIN))
    }
}

/// Whether a Redis answers `PING` at `client`'s address (within a second).
pub async fn answers_ping(client: &redis::Client) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn running(pid: u32) -> bool {
        // A reaped process leaves no /proc entry.
        Path::new(&format!("/proc/{pid}")).exists()
    }

    #[tokio::test]
    async fn a_started_server_answers_and_is_gone_once_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let server = RedisServer::builder(dir.path()).start().await.unwrap();
        let client = redis::Client::open(server.url()).unwrap();
        assert!(answers_ping(&client).await);
        let pid = server.pid().unwrap();
        drop(server);
        assert!(!running(pid));
        assert!(!answers_ping(&client).await);
    }

    #[tokio::test]
    async fn a_persistent_server_keeps_its_data_across_a_stop() {
        let dir = tempfile::tempdir().unwrap();
        let builder = RedisServer::builder(dir.path()).persistent(true);
        let server = builder.start().await.unwrap();
        let client = redis::Client::open(server.url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let () = redis::cmd("SET")
            .arg("k")
            .arg("v")
            .query_async(&mut conn)
            .await
            .unwrap();
        server.stop().await;
        let again = builder.start().await.unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let value: String = redis::cmd("GET")
            .arg("k")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(value, "v");
        drop(again);
    }

    #[tokio::test]
    async fn a_missing_program_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let err = RedisServer::builder(dir.path())
            .program("/nonexistent/redis-server")
            .start()
            .await
            .unwrap_err();
        assert!(matches!(err, StartError::NotFound(p) if p.contains("nonexistent")));
    }

    #[tokio::test]
    async fn a_server_refusing_its_arguments_is_reported_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let started = Instant::now();
        let err = RedisServer::builder(dir.path())
            .args(["--no-such-option"])
            .start()
            .await
            .unwrap_err();
        assert!(matches!(err, StartError::Exited(_)), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
